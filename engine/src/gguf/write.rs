//! A minimal GGUF writer, for generated test files and synthetic models.

use super::parse::DEFAULT_ALIGNMENT;
use super::types::GgmlType;
use super::value::{Array, Value};

/// A tensor to write: name, ggml dims (fastest first), type and its raw block bytes.
#[derive(Debug, Clone)]
pub struct TensorData {
    /// Tensor name.
    pub name: String,
    /// Dimensions in ggml order.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Raw bytes in the type's block format.
    pub bytes: Vec<u8>,
}

/// Builds a GGUF v3 file in memory.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorData>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn array_elem_id(a: &Array) -> u32 {
    match a {
        Array::U8(_) => 0,
        Array::I8(_) => 1,
        Array::U16(_) => 2,
        Array::I16(_) => 3,
        Array::U32(_) => 4,
        Array::I32(_) => 5,
        Array::F32(_) => 6,
        Array::Bool(_) => 7,
        Array::String(_) => 8,
        Array::Array(_) => 9,
        Array::U64(_) => 10,
        Array::I64(_) => 11,
        Array::F64(_) => 12,
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&array_elem_id(a).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => v.iter().for_each(|x| out.push(*x as u8)),
        Array::U16(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::I16(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::U32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::I32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::Bool(v) => v.iter().for_each(|x| out.push(u8::from(*x))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|x| put_array(out, x)),
        Array::U64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::I64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

impl Writer {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata key.
    pub fn kv(mut self, key: &str, value: Value) -> Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a tensor.
    pub fn tensor(mut self, t: TensorData) -> Self {
        self.tensors.push(t);
        self
    }

    /// Serialises the file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let specs: Vec<TensorSpec> = self
            .tensors
            .iter()
            .map(|t| TensorSpec {
                name: t.name.clone(),
                dims: t.dims.clone(),
                ty: t.ty,
            })
            .collect();
        let sizes: Vec<u64> = self.tensors.iter().map(|t| t.bytes.len() as u64).collect();
        let mut out = Vec::new();
        write_sized(&self.metadata, &specs, &sizes, &mut out, |i, buf| {
            buf.clear();
            buf.extend_from_slice(&self.tensors[i].bytes);
            Ok(())
        })
        .expect("writing to a Vec cannot fail");
        out
    }
}

/// A tensor's name, ggml dims and type, without its bytes (for streamed writing).
#[derive(Debug, Clone)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Dimensions in ggml order.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
}

impl TensorSpec {
    fn size(&self) -> std::io::Result<u64> {
        self.dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .and_then(|n| self.ty.bytes_for(n))
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "tensor {}: dims {:?} are not whole {:?} blocks",
                    self.name, self.dims, self.ty
                ))
            })
    }
}

/// Writes a GGUF v3 file tensor by tensor: `produce(i, buf)` fills `buf` with tensor `i`'s
/// bytes just before they are written, so a multi-GB file never sits in memory.
pub fn write_streaming(
    metadata: &[(String, Value)],
    tensors: &[TensorSpec],
    out: &mut impl std::io::Write,
    produce: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let sizes = tensors
        .iter()
        .map(TensorSpec::size)
        .collect::<std::io::Result<Vec<u64>>>()?;
    write_sized(metadata, tensors, &sizes, out, produce)
}

/// Writes with explicit per-tensor byte sizes, which need not match the dims: tests use this
/// to build deliberately malformed files.
fn write_sized(
    metadata: &[(String, Value)],
    tensors: &[TensorSpec],
    sizes: &[u64],
    out: &mut impl std::io::Write,
    mut produce: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let alignment = metadata
        .iter()
        .find(|(k, _)| k == "general.alignment")
        .and_then(|(_, v)| v.as_u64())
        .unwrap_or(DEFAULT_ALIGNMENT);
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        put_str(&mut head, k);
        head.extend_from_slice(&type_id(v).to_le_bytes());
        put_value(&mut head, v);
    }
    let mut offset = 0u64;
    for (t, &size) in tensors.iter().zip(sizes) {
        put_str(&mut head, &t.name);
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&t.ty.id().to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + size).div_ceil(alignment) * alignment;
    }
    let data_start = (head.len() as u64).div_ceil(alignment) * alignment;
    head.resize(data_start as usize, 0);
    out.write_all(&head)?;
    let mut buf = Vec::new();
    let mut written = 0u64;
    for (i, t) in tensors.iter().enumerate() {
        produce(i, &mut buf)?;
        if buf.len() as u64 != sizes[i] {
            return Err(std::io::Error::other(format!(
                "tensor {}: {} bytes produced, {} expected",
                t.name,
                buf.len(),
                sizes[i]
            )));
        }
        out.write_all(&buf)?;
        written += buf.len() as u64;
        let pad = written.div_ceil(alignment) * alignment - written;
        out.write_all(&vec![0u8; pad as usize])?;
        written += pad;
    }
    Ok(())
}
