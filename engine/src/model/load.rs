//! Streams weights from a GGUF source to a device, tensor by tensor and chunk by chunk, so host
//! memory during a load stays at about one chunk (never a whole model, never a whole tensor).

use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use super::ModelError;
use crate::gguf::{GgmlType, Gguf, RangeSource, TensorInfo};
use crate::quant::{MAX_CHUNK_BYTES, QMatrix};
use crate::quant::{QuantError, dequantize_vec};

/// Host bytes read per chunk; also the largest device buffer a weight chunk takes.
pub const DEFAULT_CHUNK_BYTES: usize = 32 << 20;

/// Largest device buffer a GPU loader fills from several chunks: WebGPU's default storage
/// binding limit, which every device binds.
pub const GROUP_BYTES: usize = 128 << 20;

/// Load progress: bytes of tensor data done out of the total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Bytes loaded so far.
    pub done: u64,
    /// Bytes to load.
    pub total: u64,
    /// The tensor being loaded.
    pub tensor: String,
}

/// Reads named tensors of one GGUF file onto a device.
pub struct Loader<'a, S: RangeSource> {
    g: &'a Gguf,
    src: &'a S,
    device: Device,
    chunk_bytes: usize,
    done: u64,
    total: u64,
    progress: &'a mut dyn FnMut(&Progress),
}

fn quant_err(tensor: &str) -> impl FnOnce(QuantError) -> ModelError + '_ {
    move |source| ModelError::Quant {
        tensor: tensor.to_string(),
        source,
    }
}

impl<'a, S: RangeSource> Loader<'a, S> {
    /// A loader for `g` (whose bytes come from `src`) onto `device`.
    pub fn new(
        g: &'a Gguf,
        src: &'a S,
        device: &Device,
        chunk_bytes: usize,
        progress: &'a mut dyn FnMut(&Progress),
    ) -> Self {
        Loader {
            g,
            src,
            device: device.clone(),
            chunk_bytes: chunk_bytes.max(4096),
            done: 0,
            total: g.tensors.iter().map(|t| t.size).sum(),
            progress,
        }
    }

    /// The device weights go to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The tensor's index entry, checked against the expected ggml dims.
    pub fn info(&self, name: &str, dims: &[u64]) -> Result<&'a TensorInfo, ModelError> {
        let t = self.g.require_tensor(name)?;
        // Trailing 1s are equivalent in ggml; compare without them.
        let trim = |d: &[u64]| {
            let mut v = d.to_vec();
            while v.len() > 1 && v.last() == Some(&1) {
                v.pop();
            }
            v
        };
        if trim(&t.dims) != trim(dims) {
            return Err(ModelError::Shape {
                tensor: name.to_string(),
                expected: dims.to_vec(),
                found: t.dims.clone(),
            });
        }
        if !t.ty.is_supported() {
            return Err(ModelError::Quant {
                tensor: name.to_string(),
                source: QuantError::Unsupported(t.ty),
            });
        }
        Ok(t)
    }

    async fn read(
        &mut self,
        t: &TensorInfo,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, ModelError> {
        let bytes = self
            .src
            .read_range(t.offset + offset, len)
            .await
            .map_err(|e| crate::gguf::GgufError::Source {
                what: format!("tensor {}", t.name),
                source: e,
            })?;
        self.done += len as u64;
        (self.progress)(&Progress {
            done: self.done,
            total: self.total,
            tensor: t.name.clone(),
        });
        Ok(bytes)
    }

    /// The ggml dims of a tensor.
    pub fn dims(&self, name: &str) -> Result<Vec<u64>, ModelError> {
        Ok(self.g.require_tensor(name)?.dims.clone())
    }

    /// A `[rows, cols]` matrix (ggml dims `[cols, rows]`) kept in its block format.
    pub async fn qmatrix(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<QMatrix, ModelError> {
        self.qmatrix_with_dims(name, &[cols as u64, rows as u64], rows, cols)
            .await
    }

    /// A tensor of ggml dims `dims` read as `rows` rows of `cols` (e.g. a conv kernel
    /// `[kw, kh, c_in, c_out]` as `c_out` rows of `kw·kh·c_in`).
    pub async fn qmatrix_with_dims(
        &mut self,
        name: &str,
        dims: &[u64],
        rows: usize,
        cols: usize,
    ) -> Result<QMatrix, ModelError> {
        let t = self.info(name, dims)?;
        let per = QMatrix::rows_per_chunk(t.ty, rows, cols, self.chunk_bytes);
        // On a GPU the chunks fill buffers of up to GROUP_BYTES: a product or lookup runs
        // once per buffer (the 4B's 262k-row head: 5 dispatches where 17 chunks took 17).
        let group = crate::device::max_binding_bytes(&self.device)
            .map(|max| QMatrix::rows_per_group(t.ty, cols, per, (max as usize).min(GROUP_BYTES)));
        let mut q = QMatrix::streaming(t.ty, rows, cols);
        self.stream(&mut q, t, rows, cols, group).await?;
        Ok(q)
    }

    /// Several `[rows, cols]` matrices of one type streamed into one matrix, their rows in the
    /// order given, in one device buffer, so that one product computes them all (a layer's q,
    /// k and v; its gate and up). Only on a GPU, and only where the types match and the rows
    /// fit one buffer; otherwise `None`, with nothing read.
    ///
    /// Joining matrices loaded apart copies them on the device, and in the browser the copies'
    /// freed buffers stay reserved, so the load would hold well over one copy of the weights.
    pub async fn qmatrix_joined(
        &mut self,
        parts: &[(&str, usize)],
        cols: usize,
    ) -> Result<Option<QMatrix>, ModelError> {
        Ok(self
            .qmatrices_shared(&[(parts, cols)])
            .await?
            .and_then(|mut m| m.pop()))
    }

    /// Matrices streamed into one device buffer and handed out as views of it. Each part is
    /// one matrix of `cols`-wide rows joined from tensors of one type, in the order given (a
    /// layer's q, k and v: one product computes them; one part is [`Loader::qmatrix_joined`]).
    /// A browser's WebGPU (Dawn) places a buffer under 4 MiB in a power-of-two block, so each
    /// 2.65 MB projection of MedGemma 4B's vision tower alone would take 4 MiB
    /// (`bench/results/h200-and-ci-vm-browser-memory-by-stage.json`). Only on a GPU, where each
    /// part's tensors share a type, every part's bytes are a multiple of the device's offset
    /// alignment where there are several (so that each view shares the buffer rather than
    /// copying it), and the whole fits one buffer; otherwise `None`, with nothing read.
    pub async fn qmatrices_shared(
        &mut self,
        parts: &[(&[(&str, usize)], usize)],
    ) -> Result<Option<Vec<QMatrix>>, ModelError> {
        let (Some(max), Some(align)) = (
            crate::device::max_binding_bytes(&self.device),
            crate::device::offset_alignment(&self.device),
        ) else {
            return Ok(None);
        };
        let mut plan = Vec::with_capacity(parts.len());
        for &(names, cols) in parts {
            let infos = names
                .iter()
                .map(|&(name, rows)| self.info(name, &[cols as u64, rows as u64]))
                .collect::<Result<Vec<_>, _>>()?;
            let Some(ty) = infos.first().map(|t| t.ty) else {
                return Ok(None);
            };
            let rows: usize = names.iter().map(|&(_, r)| r).sum();
            let words = rows * crate::quant::pack::row_words(ty, cols);
            let aligned = parts.len() == 1 || ((words * 4) as u64).is_multiple_of(align);
            if infos.iter().any(|t| t.ty != ty) || !aligned {
                return Ok(None);
            }
            plan.push((infos, names, ty, rows, cols, words));
        }
        let total: usize = plan.iter().map(|p| p.5).sum();
        if total * 4 > (max as usize).min(MAX_CHUNK_BYTES) {
            return Ok(None);
        }
        let mut buffer = Some(Tensor::<1, Int>::empty([total], (&self.device, DType::U32)));
        let mut at = 0;
        for (infos, names, ty, _, cols, words) in &plan {
            let wpr = crate::quant::pack::row_words(*ty, *cols);
            let mut row0 = at;
            for (t, &(_, n)) in infos.iter().zip(names.iter()) {
                self.stream_chunks(t, n, *cols, |bytes, k, row| {
                    let w = buffer.take().expect("the shared buffer");
                    let w = QMatrix::write_packed(w, row0 + row * wpr, t.ty, bytes, k, *cols)?;
                    buffer = Some(w);
                    Ok(())
                })
                .await?;
                row0 += n * wpr;
            }
            at += words;
        }
        // The views only once every write is queued: each write goes to the one handle.
        let buffer = buffer.expect("the shared buffer");
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number =
            (plan.len() > 1).then(|| NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut at = 0;
        Ok(Some(
            plan.into_iter()
                .map(|(_, _, ty, rows, cols, words)| {
                    let view = buffer.clone().slice(at..at + words);
                    at += words;
                    QMatrix::view(ty, rows, cols, view, number)
                })
                .collect(),
        ))
    }

    /// Reads tensor `t` (`rows` rows of `cols`) chunk by chunk onto the device as `q`'s next
    /// rows: into buffers of `group` rows written in place where given (a GPU), else one
    /// buffer a chunk.
    async fn stream(
        &mut self,
        q: &mut QMatrix,
        t: &TensorInfo,
        rows: usize,
        cols: usize,
        group: Option<usize>,
    ) -> Result<(), ModelError> {
        let device = self.device.clone();
        self.stream_chunks(t, rows, cols, |bytes, n, _| match group {
            Some(g) => q.push_chunk_grouped(bytes, n, &device, g),
            None => q.push_chunk(bytes, n, &device),
        })
        .await
    }

    /// Reads tensor `t` (`rows` rows of `cols`) chunk by chunk, handing `put` each chunk's
    /// bytes, its row count and its first row, and the device each chunk's writes.
    async fn stream_chunks(
        &mut self,
        t: &TensorInfo,
        rows: usize,
        cols: usize,
        mut put: impl FnMut(&[u8], usize, usize) -> Result<(), QuantError>,
    ) -> Result<(), ModelError> {
        let row_bytes = (t.size / rows.max(1) as u64) as usize;
        let per = QMatrix::rows_per_chunk(t.ty, rows, cols, self.chunk_bytes);
        let mut row = 0;
        while row < rows {
            let n = per.min(rows - row);
            let bytes = self
                .read(t, (row * row_bytes) as u64, n * row_bytes)
                .await?;
            put(&bytes, n, row).map_err(quant_err(&t.name))?;
            // Hand the chunk's write to the device now: a GPU queue otherwise holds up to 32
            // tasks (CubeCL's default batch), each keeping its chunk's bytes alive in host (wasm)
            // memory, ~1 GB at 32 MiB a chunk. On the CPU this does nothing.
            self.device
                .flush()
                .map_err(|e| ModelError::Device(format!("{e:?}")))?;
            crate::device::submit_writes(&self.device);
            row += n;
        }
        Ok(())
    }

    /// A tensor dequantised on the host to f32 (norms, biases, embeddings tables of the tower).
    pub async fn dense<const D: usize>(
        &mut self,
        name: &str,
        shape: [usize; D],
    ) -> Result<Tensor<D>, ModelError> {
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let t = self.info(name, &dims)?;
        let bytes = self.read(t, 0, t.size as usize).await?;
        let n = shape.iter().product();
        let v = dequantize_vec(t.ty, &bytes, n).map_err(quant_err(name))?;
        Ok(Tensor::from_data(TensorData::new(v, shape), &self.device))
    }

    /// A vector of length `len`.
    pub async fn vector(&mut self, name: &str, len: usize) -> Result<Tensor<1>, ModelError> {
        self.dense(name, [len]).await
    }

    /// A matrix stored in HF's `[in, out]` order (ggml dims `[out, in]`), transposed to `[out, in]`
    /// rows on the host. Only element types (F32/F16/BF16) can be transposed losslessly, and
    /// llama.cpp's converter forces F16 for the one tensor stored this way.
    pub async fn qmatrix_transposed(
        &mut self,
        name: &str,
        out: usize,
        inp: usize,
    ) -> Result<QMatrix, ModelError> {
        let t = self.info(name, &[out as u64, inp as u64])?;
        let width = match t.ty {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            other => {
                return Err(ModelError::Unsupported(format!(
                    "{name} in {other}: only F32/F16/BF16 can be transposed at load (llama.cpp writes F16)"
                )));
            }
        };
        let bytes = self.read(t, 0, t.size as usize).await?;
        let mut tr = vec![0u8; bytes.len()];
        for i in 0..inp {
            for o in 0..out {
                let (src, dst) = ((i * out + o) * width, (o * inp + i) * width);
                tr[dst..dst + width].copy_from_slice(&bytes[src..src + width]);
            }
        }
        let mut q = QMatrix::streaming(t.ty, out, inp);
        q.push_chunk(&tr, out, &self.device)
            .map_err(quant_err(name))?;
        Ok(q)
    }
}
