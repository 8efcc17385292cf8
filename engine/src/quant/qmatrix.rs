//! [`QMatrix`]: a weight matrix kept in its GGUF block format on a device, split into buffers of
//! at most [`MAX_CHUNK_BYTES`], with the products and gathers the model calls on it.

use burn::backend::Dispatch;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use super::QuantError;
use super::choice::{Half, Kernel, native_half_in_use, resolve, shader_f16};
use super::ops::QuantOps;
use super::pack::{pack_rows, row_words};
use crate::gguf::GgmlType;
use crate::kernels::forms::{self, Form};
use crate::kernels::queues_work;

/// `out` with the test fault of the forms that computed it, if one is injected (see
/// [`forms::perturb`]).
fn perturbed(out: Tensor<2>, kernel: Kernel, half: Half, device: &Device) -> Tensor<2> {
    let out = match kernel.form() {
        Some(form) => forms::perturb(form, out),
        None => out,
    };
    let native = match half {
        Half::Native => true,
        Half::Auto => shader_f16(device) == Some(true) && native_half_in_use(),
        Half::Integer => false,
    };
    if native {
        forms::perturb(Form::NativeHalf, out)
    } else {
        out
    }
}

/// Largest device buffer a weight chunk may take; rows are split so no chunk exceeds it (the
/// 262k-row embedding of Gemma 3 would otherwise need one 550 MB buffer).
pub const MAX_CHUNK_BYTES: usize = 256 << 20;

/// One device buffer of consecutive packed rows.
#[derive(Debug, Clone)]
struct Chunk {
    row0: usize,
    rows: usize,
    words: Tensor<1, Int>,
}

/// A `[rows, cols]` weight matrix kept in its GGUF block format on a device.
#[derive(Debug, Clone)]
pub struct QMatrix {
    /// Block type.
    pub ty: GgmlType,
    /// Output features (rows).
    pub rows: usize,
    /// Input features (weights per row).
    pub cols: usize,
    chunks: Vec<Chunk>,
    /// The number of the device buffer this matrix shares with others, if it is a view of one
    /// ([`QMatrix::view`]).
    shared: Option<u64>,
}

/// u32 words on a device without a float round trip.
pub(super) fn u32_tensor(words: Vec<u32>, device: &Device) -> Tensor<1, Int> {
    let n = words.len();
    Tensor::<1, Int>::from_data(TensorData::new(words, [n]), (device, DType::U32))
}

impl QMatrix {
    /// Uploads GGUF bytes of a `[rows, cols]` matrix, split into chunks of at most
    /// `max_chunk_bytes` (never fewer than one row per chunk).
    pub fn upload(
        ty: GgmlType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        device: &Device,
        max_chunk_bytes: usize,
    ) -> Result<QMatrix, QuantError> {
        let row_bytes = ty
            .bytes_for(cols as u64)
            .filter(|b| *b as usize * rows == bytes.len())
            .ok_or(QuantError::SizeMismatch {
                ty,
                bytes: bytes.len(),
                weights: rows * cols,
            })? as usize;
        let per = Self::rows_per_chunk(ty, rows, cols, max_chunk_bytes);
        let mut q = Self::streaming(ty, rows, cols);
        for chunk in bytes.chunks((per * row_bytes).max(1)) {
            q.push_chunk(chunk, chunk.len() / row_bytes.max(1), device)?;
        }
        Ok(q)
    }

    /// A `[rows, cols]` matrix of `ty` whose packed rows are `words`, one device buffer or a
    /// view of the buffer numbered `shared` that other matrices share
    /// ([`crate::model::load::Loader::qmatrices_shared`]).
    pub fn view(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        words: Tensor<1, Int>,
        shared: Option<u64>,
    ) -> QMatrix {
        QMatrix {
            ty,
            rows,
            cols,
            chunks: vec![Chunk {
                row0: 0,
                rows,
                words,
            }],
            shared,
        }
    }

    /// The number of the device buffer this matrix shares with others, if it is a view.
    pub fn shared_buffer(&self) -> Option<u64> {
        self.shared
    }

    /// Packs the GGUF bytes of `n_rows` rows of `ty` and writes them into the u32 buffer `w`
    /// from word `at` on, in place (a queue write; GPU devices only); returns `w`.
    pub fn write_packed(
        w: Tensor<1, Int>,
        at: usize,
        ty: GgmlType,
        bytes: &[u8],
        n_rows: usize,
        cols: usize,
    ) -> Result<Tensor<1, Int>, QuantError> {
        let words = pack_rows(ty, bytes, n_rows, cols)?;
        Ok(Tensor::<1, Int>::from_dispatch(
            <Dispatch as QuantOps>::write_words(w.into_dispatch(), at, words),
        ))
    }

    /// Rows per device chunk so that a chunk stays within `max_chunk_bytes` (at least one).
    pub fn rows_per_chunk(ty: GgmlType, rows: usize, cols: usize, max_chunk_bytes: usize) -> usize {
        (max_chunk_bytes / (row_words(ty, cols) * 4).max(1)).clamp(1, rows.max(1))
    }

    /// Starts an empty matrix to be filled chunk by chunk ([`QMatrix::push_chunk`]), so a
    /// loader never holds more than one chunk of a tensor in host memory.
    pub fn streaming(ty: GgmlType, rows: usize, cols: usize) -> QMatrix {
        QMatrix {
            ty,
            rows,
            cols,
            chunks: Vec::new(),
            shared: None,
        }
    }

    /// Packs and uploads the GGUF bytes of the next `n_rows` rows.
    pub fn push_chunk(
        &mut self,
        bytes: &[u8],
        n_rows: usize,
        device: &Device,
    ) -> Result<(), QuantError> {
        let row0 = self.chunks.last().map_or(0, |c| c.row0 + c.rows);
        let words = pack_rows(self.ty, bytes, n_rows, self.cols)?;
        self.chunks.push(Chunk {
            row0,
            rows: n_rows,
            words: u32_tensor(words, device),
        });
        Ok(())
    }

    /// [`QMatrix::push_chunk`] into device buffers of `group_rows` rows (the last one shorter),
    /// filled chunk by chunk in place, so that a matrix streamed in small chunks is multiplied
    /// and looked up in few dispatches, and no row is ever held twice on the device.
    /// `group_rows` must be a multiple of every `n_rows` pushed but the last. Each chunk is a
    /// queue write at its offset: an upload buffer per chunk copied by a kernel left its freed
    /// buffers reserved in the browser's pool, and a copy whenever the buffer had a second handle.
    pub fn push_chunk_grouped(
        &mut self,
        bytes: &[u8],
        n_rows: usize,
        device: &Device,
        group_rows: usize,
    ) -> Result<(), QuantError> {
        let wpr = row_words(self.ty, self.cols);
        let open = |c: &Chunk| c.rows < c.words.dims()[0] / wpr.max(1);
        let row0 = self.chunks.last().map_or(0, |c| c.row0 + c.rows);
        let words = pack_rows(self.ty, bytes, n_rows, self.cols)?;
        let write = |w: Tensor<1, Int>, at: usize, words: Vec<u32>| {
            Tensor::<1, Int>::from_dispatch(<Dispatch as QuantOps>::write_words(
                w.into_dispatch(),
                at,
                words,
            ))
        };
        match self.chunks.pop() {
            Some(mut c) if open(&c) => {
                c.words = write(c.words, c.rows * wpr, words);
                c.rows += n_rows;
                self.chunks.push(c);
            }
            last => {
                self.chunks.extend(last);
                let cap = group_rows.min(self.rows - row0).max(n_rows);
                let words = if cap == n_rows {
                    u32_tensor(words, device)
                } else {
                    write(
                        Tensor::<1, Int>::empty([cap * wpr], (device, DType::U32)),
                        0,
                        words,
                    )
                };
                self.chunks.push(Chunk {
                    row0,
                    rows: n_rows,
                    words,
                });
            }
        }
        Ok(())
    }

    /// Rows per device buffer for [`QMatrix::push_chunk_grouped`]: whole streaming chunks of
    /// `per` rows, as many as fit in `max_bytes` (at least one).
    pub fn rows_per_group(ty: GgmlType, cols: usize, per: usize, max_bytes: usize) -> usize {
        per * (max_bytes / (per * row_words(ty, cols) * 4).max(1)).max(1)
    }

    /// Whether every row has been uploaded.
    pub fn is_complete(&self) -> bool {
        self.chunks.iter().map(|c| c.rows).sum::<usize>() == self.rows
    }

    /// `a`'s rows then `b`'s as one matrix in one device buffer, so that one dispatch multiplies
    /// both (a layer's FFN gate and up); both handed back unless each is one buffer of the same
    /// type and width and the two fit in [`MAX_CHUNK_BYTES`]. A copy: the CPU's loader joins
    /// this way; a GPU's streams the parts into one buffer (`Loader::qmatrix_joined`).
    #[allow(clippy::result_large_err)]
    pub fn join(a: QMatrix, b: QMatrix) -> Result<QMatrix, (QMatrix, QMatrix)> {
        let fits = (a.rows + b.rows) * row_words(a.ty, a.cols) * 4 <= MAX_CHUNK_BYTES;
        if a.ty != b.ty || a.cols != b.cols || a.chunks.len() != 1 || b.chunks.len() != 1 || !fits {
            return Err((a, b));
        }
        let rows = a.rows + b.rows;
        let words = Tensor::cat(
            vec![a.chunks[0].words.clone(), b.chunks[0].words.clone()],
            0,
        );
        Ok(QMatrix {
            ty: a.ty,
            rows,
            cols: a.cols,
            chunks: vec![Chunk {
                row0: 0,
                rows,
                words,
            }],
            shared: None,
        })
    }

    /// Number of device buffers.
    pub fn n_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// `x [m, cols] → [m, rows]`.
    pub fn matmul(&self, x: Tensor<2>) -> Tensor<2> {
        self.matmul_with(x, Kernel::Auto)
    }

    /// [`QMatrix::matmul`] with a chosen device kernel (tests and the benchmark compare them).
    pub fn matmul_with(&self, x: Tensor<2>, kernel: Kernel) -> Tensor<2> {
        self.matmul_variant(x, kernel, Half::Auto)
    }

    /// [`QMatrix::matmul`] with a chosen device kernel and f16 form.
    pub fn matmul_variant(&self, x: Tensor<2>, kernel: Kernel, half: Half) -> Tensor<2> {
        // Resolved here rather than in the backend so an injected test fault can follow the
        // automatic choice to the form it picked.
        let x_device = x.device();
        let kernel = resolve(&x_device, kernel, [x.dims()[0], self.rows, self.cols]);
        let product = |c: &Chunk| {
            Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qmatmul(
                x.clone().into_dispatch(),
                c.words.clone().into_dispatch(),
                self.ty.id(),
                c.rows,
                self.cols,
                kernel.id(),
                half.id(),
            ))
        };
        let out = match self.chunks.as_slice() {
            [one] => product(one),
            chunks if !queues_work(&x_device) => {
                Tensor::cat(chunks.iter().map(product).collect(), 1)
            }
            // Each chunk writes its columns of one output: the 4B's 17-chunk head is 17
            // dispatches, where products and a concatenation took 34.
            _ => {
                let all = Tensor::<2>::empty([x.dims()[0], self.rows], &x_device);
                self.write_columns(x, all, 0, kernel, half)
            }
        };
        perturbed(out, kernel, half, &x_device)
    }

    /// `x [m, cols] · Wᵀ` written into columns `col0..col0 + rows` of `out` (`[m, ·]`,
    /// contiguous, returned): products that one kernel reads as one tensor (a layer's q, k and
    /// v) without a concatenation. GPU devices only (see `QuantOps::qmatmul_into`).
    pub fn matmul_into(&self, x: Tensor<2>, out: Tensor<2>, col0: usize) -> Tensor<2> {
        let device = x.device();
        let kernel = resolve(&device, Kernel::Auto, [x.dims()[0], self.rows, self.cols]);
        let out = self.write_columns(x, out, col0, kernel, Half::Auto);
        perturbed(out, kernel, Half::Auto, &device)
    }

    /// `x [m, cols] · [a; b]ᵀ → [m, a.rows + b.rows]` in one dispatch, for two matrices of
    /// the same width whose block types differ (Q4_K_M's Q4_K q and k rows beside a Q6_K v),
    /// with the kernel the automatic choice takes. `None` where that cannot be one dispatch
    /// (the CPU, a split matrix, different widths) or the self-test turned the form off.
    pub fn matmul_stacked(a: &QMatrix, b: &QMatrix, x: Tensor<2>) -> Option<Tensor<2>> {
        if !forms::enabled(Form::StackedProduct) {
            return None;
        }
        QMatrix::matmul_stacked_variant(a, b, x, Kernel::Auto, Half::Auto)
    }

    /// [`QMatrix::matmul_stacked`] with a chosen kernel and f16 form, whether or not the
    /// self-test turned the form off (tests and the self-test compare them).
    pub fn matmul_stacked_variant(
        a: &QMatrix,
        b: &QMatrix,
        x: Tensor<2>,
        kernel: Kernel,
        half: Half,
    ) -> Option<Tensor<2>> {
        if a.cols != b.cols {
            return None;
        }
        a.fused_product(Some(b), x, kernel, half)
    }

    /// `gelu_tanh(gate) · up` for this matrix of gate rows then up rows (a joined FFN gate and
    /// up): `x [m, cols] → [m, rows / 2]` in one dispatch, the GELU applied where the sums are
    /// made. `None` where the automatic choice takes a kernel without that form (the tiled
    /// one, past [`super::GEMV_MAX_M`] rows; the CPU), for a split matrix, or where the self-test
    /// turned the form off: the caller then multiplies and applies the GELU kernel.
    pub fn matmul_gelu_halves(&self, x: Tensor<2>) -> Option<Tensor<2>> {
        if !forms::enabled(Form::GeluProduct) {
            return None;
        }
        self.matmul_gelu_variant(x, Kernel::Auto, Half::Auto)
    }

    /// [`QMatrix::matmul_gelu_halves`] with a chosen kernel and f16 form, whether or not the
    /// self-test turned the form off; `None` also for the tiled kernel.
    pub fn matmul_gelu_variant(
        &self,
        x: Tensor<2>,
        kernel: Kernel,
        half: Half,
    ) -> Option<Tensor<2>> {
        if !self.rows.is_multiple_of(2) {
            return None;
        }
        self.fused_product(None, x, kernel, half)
    }

    /// One [`QuantOps::qmatmul_fused`] dispatch: this matrix's rows then `second`'s, or without
    /// `second` this matrix as a joined gate and up with GELU·up applied; with the test faults
    /// of the forms it ran. `None` off a GPU, for a split matrix, and for GELU·up where
    /// `kernel` resolves to the tiled kernel.
    fn fused_product(
        &self,
        second: Option<&QMatrix>,
        x: Tensor<2>,
        kernel: Kernel,
        half: Half,
    ) -> Option<Tensor<2>> {
        let device = x.device();
        let gelu = second.is_none();
        let b = second.unwrap_or(self);
        let ([ca], [cb]) = (self.chunks.as_slice(), b.chunks.as_slice()) else {
            return None;
        };
        let n = self.rows + second.map_or(0, |b| b.rows);
        let kernel = resolve(&device, kernel, [x.dims()[0], n, self.cols]);
        if !queues_work(&device) || (gelu && kernel.tiled()) {
            return None;
        }
        let out = Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qmatmul_fused(
            x.into_dispatch(),
            ca.words.clone().into_dispatch(),
            cb.words.clone().into_dispatch(),
            self.ty.id(),
            b.ty.id(),
            self.rows,
            second.map_or(0, |b| b.rows),
            self.cols,
            kernel.id(),
            half.id(),
            gelu,
        ));
        let form = if gelu {
            Form::GeluProduct
        } else {
            Form::StackedProduct
        };
        Some(forms::perturb(form, perturbed(out, kernel, half, &device)))
    }

    /// Every chunk's product written into its columns of `out`, from `col0`.
    fn write_columns(
        &self,
        x: Tensor<2>,
        out: Tensor<2>,
        col0: usize,
        kernel: Kernel,
        half: Half,
    ) -> Tensor<2> {
        self.chunks.iter().fold(out, |out, c| {
            Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qmatmul_into(
                x.clone().into_dispatch(),
                c.words.clone().into_dispatch(),
                out.into_dispatch(),
                self.ty.id(),
                c.rows,
                self.cols,
                kernel.id(),
                half.id(),
                col0 + c.row0,
            ))
        })
    }

    /// Rows `ids` dequantised: `[ids.len(), cols]`. Ids must be `< rows`.
    pub fn gather(&self, ids: &[u32]) -> Tensor<2> {
        let device = self.chunks[0].words.device();
        crate::launches::note_upload();
        self.gather_device(u32_tensor(ids.to_vec(), &device))
    }

    /// Rows `ids` dequantised, for ids that stay on the device (`[n]` u32, each `< rows`):
    /// every chunk looks up the ids it holds and the parts are added, so no id is read back.
    pub fn gather_device(&self, ids: Tensor<1, Int>) -> Tensor<2> {
        self.gather_with(ids, Half::Auto)
    }

    /// [`QMatrix::gather_device`] with a chosen f16 form.
    pub fn gather_with(&self, ids: Tensor<1, Int>, half: Half) -> Tensor<2> {
        let gather = |c: &Chunk| {
            Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qgather(
                ids.clone().into_dispatch(),
                c.words.clone().into_dispatch(),
                self.ty.id(),
                self.cols,
                c.row0,
                c.rows,
                half.id(),
            ))
        };
        let (first, rest) = self
            .chunks
            .split_first()
            .expect("a matrix has at least one chunk");
        if !queues_work(&ids.device()) {
            return rest.iter().fold(gather(first), |a, c| a + gather(c));
        }
        // Each later chunk writes the rows it holds into the first chunk's output: a lookup
        // of the 4B's 17-chunk embedding is 17 dispatches where gathers and sums took 33.
        rest.iter().fold(gather(first), |out, c| {
            Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qgather_into(
                ids.clone().into_dispatch(),
                c.words.clone().into_dispatch(),
                out.into_dispatch(),
                self.ty.id(),
                self.cols,
                c.row0,
                c.rows,
                half.id(),
            ))
        })
    }
}
