//! The GGUF header parser: a pure function over a prefix of the file.
//!
//! It never reads past the bytes it is given; when it needs more it says how many, so the same
//! code serves a native file and a browser `Blob` read in ranges. Every count and length is
//! checked against the *file* size before anything is allocated, so a hostile header cannot make
//! it allocate more than the file could hold.

use std::collections::HashSet;

use super::types::GgmlType;
use super::value::{Array, TYPE_NAMES, Value};
use super::{Gguf, GgufError, TensorInfo};

/// ref: ggml/include/gguf.h GGUF_DEFAULT_ALIGNMENT.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ref: ggml/include/ggml.h GGML_MAX_DIMS.
pub const MAX_DIMS: u32 = 4;
/// Arrays of arrays deeper than this are rejected (no real file nests at all).
const MAX_ARRAY_DEPTH: u32 = 3;

/// Why a parse stopped.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The prefix is too short: at least this many bytes of the file are needed.
    NeedMore(u64),
    /// The file is malformed.
    Bad(GgufError),
}

impl From<GgufError> for Stop {
    fn from(e: GgufError) -> Self {
        Stop::Bad(e)
    }
}

type Result<T> = std::result::Result<T, Stop>;

struct Cursor<'a> {
    buf: &'a [u8],
    pos: u64,
    file_size: u64,
}

impl<'a> Cursor<'a> {
    fn remaining_in_file(&self) -> u64 {
        self.file_size.saturating_sub(self.pos)
    }

    /// Takes `n` bytes, distinguishing "the file is too short" from "read more of it".
    fn take(&mut self, n: u64, field: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| GgufError::Truncated {
                field: field(),
                offset: self.pos,
                needed: n,
                file_size: self.file_size,
            })?;
        if end > self.file_size {
            return Err(GgufError::Truncated {
                field: field(),
                offset: self.pos,
                needed: n,
                file_size: self.file_size,
            }
            .into());
        }
        if end > self.buf.len() as u64 {
            return Err(Stop::NeedMore(end));
        }
        let s = &self.buf[self.pos as usize..end as usize];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N as u64, field)?;
        Ok(s.try_into().expect("take returns exactly N bytes"))
    }

    fn u32(&mut self, field: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit in the rest of the file.
    fn check_count(&self, count: u64, min_size: u64, field: &dyn Fn() -> String) -> Result<()> {
        match count.checked_mul(min_size) {
            Some(bytes) if bytes <= self.remaining_in_file() => Ok(()),
            _ => Err(GgufError::AbsurdCount {
                field: field(),
                offset: self.pos,
                count,
                remaining: self.remaining_in_file(),
            }
            .into()),
        }
    }

    fn string(&mut self, field: &dyn Fn() -> String) -> Result<String> {
        let start = self.pos;
        let len = self.u64(field)?;
        self.check_count(len, 1, field)?;
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| {
            GgufError::InvalidUtf8 {
                field: field(),
                offset: start,
            }
            .into()
        })
    }
}

/// Smallest encoded size of one value of a GGUF type, used to bound array counts.
fn min_encoded_size(type_id: u32) -> u64 {
    match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        // An array value is at least its element type and count.
        9 => 12,
        _ => 1,
    }
}

fn value(
    c: &mut Cursor<'_>,
    type_id: u32,
    depth: u32,
    field: &dyn Fn() -> String,
) -> Result<Value> {
    let offset = c.pos;
    Ok(match type_id {
        0 => Value::U8(c.array::<1>(field)?[0]),
        1 => Value::I8(c.array::<1>(field)?[0] as i8),
        2 => Value::U16(u16::from_le_bytes(c.array(field)?)),
        3 => Value::I16(i16::from_le_bytes(c.array(field)?)),
        4 => Value::U32(c.u32(field)?),
        5 => Value::I32(i32::from_le_bytes(c.array(field)?)),
        6 => Value::F32(f32::from_le_bytes(c.array(field)?)),
        7 => match c.array::<1>(field)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            b => {
                return Err(GgufError::BadBool {
                    field: field(),
                    offset,
                    byte: b,
                }
                .into());
            }
        },
        8 => Value::String(c.string(field)?),
        9 => Value::Array(array(c, depth, field)?),
        10 => Value::U64(c.u64(field)?),
        11 => Value::I64(i64::from_le_bytes(c.array(field)?)),
        12 => Value::F64(f64::from_le_bytes(c.array(field)?)),
        id => {
            return Err(GgufError::UnknownValueType {
                field: field(),
                offset,
                id,
            }
            .into());
        }
    })
}

fn array(c: &mut Cursor<'_>, depth: u32, field: &dyn Fn() -> String) -> Result<Array> {
    let offset = c.pos;
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::TooDeep {
            field: field(),
            offset,
        }
        .into());
    }
    let elem = c.u32(field)?;
    if elem as usize >= TYPE_NAMES.len() {
        return Err(GgufError::UnknownValueType {
            field: field(),
            offset,
            id: elem,
        }
        .into());
    }
    let count = c.u64(field)?;
    c.check_count(count, min_encoded_size(elem), field)?;
    let n = count as usize;

    /// Reads `n` fixed-size little-endian numbers in one slice.
    macro_rules! numbers {
        ($t:ty, $variant:ident) => {{
            const SIZE: usize = std::mem::size_of::<$t>();
            let bytes = c.take(count * SIZE as u64, field)?;
            Array::$variant(
                bytes
                    .chunks_exact(SIZE)
                    .map(|b| <$t>::from_le_bytes(b.try_into().expect("chunk of SIZE")))
                    .collect(),
            )
        }};
    }

    Ok(match elem {
        0 => numbers!(u8, U8),
        1 => numbers!(i8, I8),
        2 => numbers!(u16, U16),
        3 => numbers!(i16, I16),
        4 => numbers!(u32, U32),
        5 => numbers!(i32, I32),
        6 => numbers!(f32, F32),
        7 => {
            let bytes = c.take(count, field)?;
            let mut out = Vec::with_capacity(n);
            for (i, &b) in bytes.iter().enumerate() {
                match b {
                    0 => out.push(false),
                    1 => out.push(true),
                    _ => {
                        return Err(GgufError::BadBool {
                            field: field(),
                            offset: offset + 12 + i as u64,
                            byte: b,
                        }
                        .into());
                    }
                }
            }
            Array::Bool(out)
        }
        8 => {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                out.push(c.string(field)?);
            }
            Array::String(out)
        }
        9 => {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                out.push(array(c, depth + 1, field)?);
            }
            Array::Array(out)
        }
        10 => numbers!(u64, U64),
        11 => numbers!(i64, I64),
        12 => numbers!(f64, F64),
        _ => unreachable!("element type checked against TYPE_NAMES above"),
    })
}

/// Parses the header, metadata and tensor index from the first `buf.len()` bytes of a file of
/// `file_size` bytes.
pub(crate) fn parse(buf: &[u8], file_size: u64) -> Result<Gguf> {
    let mut c = Cursor {
        buf,
        pos: 0,
        file_size,
    };
    let magic: [u8; 4] = c.array(&|| "magic".into())?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic }.into());
    }
    let version = c.u32(&|| "version".into())?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion(version).into());
    }
    let tensor_count = c.u64(&|| "tensor count".into())?;
    let kv_count = c.u64(&|| "metadata count".into())?;
    // A key/value pair is at least an empty key (8), a type (4) and a 1-byte value.
    c.check_count(kv_count, 13, &|| "metadata count".into())?;
    // A tensor info is at least an empty name (8), n_dims (4), type (4) and offset (8).
    c.check_count(tensor_count, 24, &|| "tensor count".into())?;

    let mut metadata = Vec::with_capacity(kv_count as usize);
    let mut keys = HashSet::with_capacity(kv_count as usize);
    for i in 0..kv_count {
        let key = c.string(&|| format!("metadata key #{i}"))?;
        let field = || format!("metadata {key}");
        let type_id = c.u32(&field)?;
        let v = value(&mut c, type_id, 0, &field)?;
        if !keys.insert(key.clone()) {
            return Err(GgufError::DuplicateKey(key).into());
        }
        metadata.push((key, v));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_u64() {
            Some(a) if a.is_power_of_two() => a,
            _ => return Err(GgufError::BadAlignment(format!("{v:?}")).into()),
        },
    };

    let mut tensors = Vec::with_capacity(tensor_count as usize);
    let mut names = HashSet::with_capacity(tensor_count as usize);
    for i in 0..tensor_count {
        let name = c.string(&|| format!("tensor #{i} name"))?;
        let field = || format!("tensor {name}");
        let n_dims = c.u32(&field)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(GgufError::BadDims {
                name: name.clone(),
                n_dims,
            }
            .into());
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(&field)?);
        }
        let type_id = c.u32(&field)?;
        let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            name: name.clone(),
            id: type_id,
        })?;
        let offset = c.u64(&field)?;
        if !names.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor(name).into());
        }
        tensors.push((name, dims, ty, offset));
    }

    let data_offset = c.pos.div_ceil(alignment) * alignment;
    let tensors = tensors
        .into_iter()
        .map(|(name, dims, ty, offset)| {
            tensor_info(name, dims, ty, offset, data_offset, alignment, file_size)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    check_overlaps(&tensors)?;

    Ok(Gguf::new(
        version,
        alignment,
        metadata,
        tensors,
        data_offset,
        file_size,
    ))
}

fn tensor_info(
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    relative_offset: u64,
    data_offset: u64,
    alignment: u64,
    file_size: u64,
) -> std::result::Result<TensorInfo, GgufError> {
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| GgufError::SizeOverflow { name: name.clone() })?;
    if !dims[0].is_multiple_of(ty.block_size()) {
        return Err(GgufError::BadBlockShape {
            name,
            ne0: dims[0],
            ty,
            block: ty.block_size(),
        });
    }
    let size = ty
        .bytes_for(n_elements)
        .ok_or_else(|| GgufError::SizeOverflow { name: name.clone() })?;
    if !relative_offset.is_multiple_of(alignment) {
        return Err(GgufError::Misaligned {
            name,
            offset: relative_offset,
            alignment,
        });
    }
    let offset = data_offset
        .checked_add(relative_offset)
        .ok_or_else(|| GgufError::SizeOverflow { name: name.clone() })?;
    let end = offset
        .checked_add(size)
        .ok_or_else(|| GgufError::SizeOverflow { name: name.clone() })?;
    if end > file_size {
        return Err(GgufError::TensorOutOfRange {
            name,
            end,
            file_size,
        });
    }
    Ok(TensorInfo {
        name,
        dims,
        ty,
        offset,
        size,
    })
}

fn check_overlaps(tensors: &[TensorInfo]) -> std::result::Result<(), GgufError> {
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        if pair[0].offset + pair[0].size > pair[1].offset {
            return Err(GgufError::Overlap {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok(())
}
