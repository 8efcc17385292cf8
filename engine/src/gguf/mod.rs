//! GGUF container: header, metadata and tensor index, read from any byte source.
//!
//! Knows nothing about models: typed metadata getters and tensor byte ranges only.

mod parse;
mod source;
mod types;
mod value;
pub mod write;

use std::collections::{BTreeMap, HashMap};

pub use parse::{DEFAULT_ALIGNMENT, MAX_DIMS};
pub use source::{FileSource, RangeSource, SliceSource, SourceError, SyncSource, check_range};
pub use types::GgmlType;
pub use value::{Array, Value};

/// Everything that can be wrong with a GGUF file, naming the field and where it is.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: it starts with {found:?} instead of \"GGUF\"")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A version this reader does not know.
    #[error("GGUF version {0} is not supported (versions 2 and 3 are)")]
    UnsupportedVersion(u32),
    /// The file ends inside a field.
    #[error(
        "{field} at offset {offset}: the file is truncated ({needed} more bytes needed, file is {file_size} bytes)"
    )]
    Truncated {
        /// Which field.
        field: String,
        /// Where it starts.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Size of the whole file.
        file_size: u64,
    },
    /// A count that cannot fit in what is left of the file.
    #[error(
        "{field} at offset {offset}: {count} items cannot fit in the {remaining} bytes left in the file"
    )]
    AbsurdCount {
        /// Which field.
        field: String,
        /// Where the count is.
        offset: u64,
        /// The count read.
        count: u64,
        /// Bytes left after it.
        remaining: u64,
    },
    /// A string that is not UTF-8.
    #[error("{field} at offset {offset}: string is not valid UTF-8")]
    InvalidUtf8 {
        /// Which field.
        field: String,
        /// Where the string starts.
        offset: u64,
    },
    /// A bool byte other than 0 or 1.
    #[error("{field} at offset {offset}: bool byte is {byte}, not 0 or 1")]
    BadBool {
        /// Which field.
        field: String,
        /// Where the byte is.
        offset: u64,
        /// The byte found.
        byte: u8,
    },
    /// A metadata type id outside 0..=12.
    #[error("{field} at offset {offset}: unknown metadata value type {id}")]
    UnknownValueType {
        /// Which field.
        field: String,
        /// Where the type id is.
        offset: u64,
        /// The id found.
        id: u32,
    },
    /// Arrays nested too deep.
    #[error("{field} at offset {offset}: arrays nested too deep")]
    TooDeep {
        /// Which field.
        field: String,
        /// Where the nested array starts.
        offset: u64,
    },
    /// The same metadata key twice.
    #[error("metadata key {0} appears twice")]
    DuplicateKey(String),
    /// The same tensor name twice.
    #[error("tensor {0} appears twice in the tensor index")]
    DuplicateTensor(String),
    /// `general.alignment` that is not a power of two.
    #[error("general.alignment must be a power of two, found {0}")]
    BadAlignment(String),
    /// Zero or too many dimensions.
    #[error("tensor {name}: {n_dims} dimensions (1 to 4 are allowed)")]
    BadDims {
        /// Tensor name.
        name: String,
        /// Dimensions found.
        n_dims: u32,
    },
    /// A tensor type id ggml does not define.
    #[error("tensor {name}: unknown ggml type id {id}")]
    UnknownTensorType {
        /// Tensor name.
        name: String,
        /// Type id found.
        id: u32,
    },
    /// Rows that are not a whole number of quantisation blocks.
    #[error(
        "tensor {name}: first dimension {ne0} is not a multiple of the {ty} block size {block}"
    )]
    BadBlockShape {
        /// Tensor name.
        name: String,
        /// First (fastest) dimension.
        ne0: u64,
        /// Tensor type.
        ty: GgmlType,
        /// Block size of that type.
        block: u64,
    },
    /// Dimensions whose product or byte size overflows.
    #[error("tensor {name}: its size overflows 64 bits")]
    SizeOverflow {
        /// Tensor name.
        name: String,
    },
    /// A tensor offset not aligned to `general.alignment`.
    #[error("tensor {name}: data offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned {
        /// Tensor name.
        name: String,
        /// Offset relative to the data section.
        offset: u64,
        /// Required alignment.
        alignment: u64,
    },
    /// A tensor that extends past the end of the file.
    #[error(
        "tensor {name}: data extends beyond the end of the file ({end} > {file_size} bytes); the file may be truncated"
    )]
    TensorOutOfRange {
        /// Tensor name.
        name: String,
        /// End offset of its data.
        end: u64,
        /// Size of the file.
        file_size: u64,
    },
    /// Two tensors sharing bytes.
    #[error("tensors {first} and {second} overlap in the data section")]
    Overlap {
        /// The earlier tensor.
        first: String,
        /// The later tensor.
        second: String,
    },
    /// A required metadata key is absent.
    #[error("metadata key {0} is missing")]
    MissingKey(String),
    /// A metadata key holds the wrong type.
    #[error("metadata key {key}: expected {expected}, found {found}")]
    WrongType {
        /// The key.
        key: String,
        /// What the caller wanted.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// A tensor that the caller needs is absent.
    #[error("tensor {0} is missing from the file")]
    MissingTensor(String),
    /// Reading the underlying bytes failed.
    #[error("reading {what}: {source}")]
    Source {
        /// What was being read.
        what: String,
        /// The underlying error.
        source: SourceError,
    },
}

/// One entry of the tensor index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.3.attn_q.weight`.
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the fastest (a `[out, in]` weight reads `[in, out]`).
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Size of the data in bytes.
    pub size: u64,
}

impl TensorInfo {
    /// Number of weights.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Length of one row (`dims[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims[0]
    }

    /// Number of rows (product of the other dimensions).
    pub fn n_rows(&self) -> u64 {
        self.dims[1..].iter().product()
    }
}

/// A parsed GGUF header: metadata and tensor index; tensor data stays in the source.
#[derive(Debug, Clone)]
pub struct Gguf {
    /// Format version (2 or 3).
    pub version: u32,
    /// Alignment of tensor data.
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensor index in file order.
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Size of the whole file in bytes.
    pub file_size: u64,
    key_index: HashMap<String, usize>,
    tensor_index: HashMap<String, usize>,
}

/// First read when loading a header; grows geometrically when the header is longer.
const FIRST_READ: u64 = 1 << 20;

impl Gguf {
    fn new(
        version: u32,
        alignment: u64,
        metadata: Vec<(String, Value)>,
        tensors: Vec<TensorInfo>,
        data_offset: u64,
        file_size: u64,
    ) -> Self {
        let key_index = metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Gguf {
            version,
            alignment,
            metadata,
            tensors,
            data_offset,
            file_size,
            key_index,
            tensor_index,
        }
    }

    /// Parses a header held entirely in memory (the slice may be the whole file or just a prefix
    /// of a file of `file_size` bytes).
    pub fn parse_prefix(buf: &[u8], file_size: u64) -> Result<Self, GgufError> {
        match parse::parse(buf, file_size) {
            Ok(g) => Ok(g),
            Err(parse::Stop::Bad(e)) => Err(e),
            Err(parse::Stop::NeedMore(n)) => Err(GgufError::Truncated {
                field: "header".into(),
                offset: buf.len() as u64,
                needed: n - buf.len() as u64,
                file_size,
            }),
        }
    }

    /// Reads the header from a synchronous source, reading only as much as the header needs.
    pub fn read(source: &mut impl SyncSource) -> Result<Self, GgufError> {
        let size = source.size();
        let mut want = FIRST_READ.min(size);
        loop {
            let mut buf = vec![0; want as usize];
            source
                .read_exact_at(0, &mut buf)
                .map_err(|e| GgufError::Source {
                    what: "GGUF header".into(),
                    source: e,
                })?;
            match parse::parse(&buf, size) {
                Ok(g) => return Ok(g),
                Err(parse::Stop::Bad(e)) => return Err(e),
                Err(parse::Stop::NeedMore(n)) => want = n.max(want * 2).min(size),
            }
        }
    }

    /// Reads the header from an asynchronous range source (a browser `Blob` or OPFS file).
    pub async fn read_async(source: &impl RangeSource) -> Result<Self, GgufError> {
        let size = source.size();
        let mut buf: Vec<u8> = Vec::new();
        let mut want = FIRST_READ.min(size);
        loop {
            // Only the missing tail is fetched on each round.
            let more = source
                .read_range(buf.len() as u64, (want - buf.len() as u64) as usize)
                .await
                .map_err(|e| GgufError::Source {
                    what: "GGUF header".into(),
                    source: e,
                })?;
            buf.extend_from_slice(&more);
            match parse::parse(&buf, size) {
                Ok(g) => return Ok(g),
                Err(parse::Stop::Bad(e)) => return Err(e),
                Err(parse::Stop::NeedMore(n)) => want = n.max(want * 2).min(size),
            }
        }
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_string()))
    }

    fn wrong(key: &str, expected: &'static str, v: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: v.type_name().to_string(),
        }
    }

    /// A non-negative integer of any integer type.
    pub fn u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| Self::wrong(key, "a non-negative integer", v))
    }

    /// A non-negative integer, or `None` when the key is absent.
    pub fn u64_opt(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.get(key).map(|_| self.u64(key)).transpose()
    }

    /// A number of any numeric type as f64.
    pub fn f64(&self, key: &str) -> Result<f64, GgufError> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| Self::wrong(key, "a number", v))
    }

    /// A number, or `None` when the key is absent.
    pub fn f64_opt(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.get(key).map(|_| self.f64(key)).transpose()
    }

    /// A string.
    pub fn str(&self, key: &str) -> Result<&str, GgufError> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            v => Err(Self::wrong(key, "a string", v)),
        }
    }

    /// A string, or `None` when the key is absent.
    pub fn str_opt(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.get(key).map(|_| self.str(key)).transpose()
    }

    /// A bool, or `None` when the key is absent.
    pub fn bool_opt(&self, key: &str) -> Result<Option<bool>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(Self::wrong(key, "a bool", v)),
        }
    }

    /// An array.
    pub fn array(&self, key: &str) -> Result<&Array, GgufError> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(Self::wrong(key, "an array", v)),
        }
    }

    /// `general.architecture`, e.g. `gemma3` or `clip`.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.str("general.architecture")
    }

    /// A tensor's index entry by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// A tensor's index entry, or an error naming the missing tensor.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor(name)
            .ok_or_else(|| GgufError::MissingTensor(name.to_string()))
    }

    /// Reads one tensor's raw bytes.
    pub fn read_tensor(
        &self,
        source: &mut impl SyncSource,
        info: &TensorInfo,
    ) -> Result<Vec<u8>, GgufError> {
        let mut buf = vec![0; info.size as usize];
        source
            .read_exact_at(info.offset, &mut buf)
            .map_err(|e| GgufError::Source {
                what: format!("tensor {}", info.name),
                source: e,
            })?;
        Ok(buf)
    }

    /// Reads one tensor's raw bytes from an asynchronous source.
    pub async fn read_tensor_async(
        &self,
        source: &impl RangeSource,
        info: &TensorInfo,
    ) -> Result<Vec<u8>, GgufError> {
        source
            .read_range(info.offset, info.size as usize)
            .await
            .map_err(|e| GgufError::Source {
                what: format!("tensor {}", info.name),
                source: e,
            })
    }

    /// Count of tensors per type, for summaries.
    pub fn type_counts(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for t in &self.tensors {
            *counts.entry(t.ty.to_string()).or_insert(0) += 1;
        }
        counts
    }

    /// The `inspect` summary: architecture, tensor count, types and metadata (arrays summarised).
    pub fn summary_json(&self) -> serde_json::Value {
        let metadata: serde_json::Map<String, serde_json::Value> = self
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.summary()))
            .collect();
        serde_json::json!({
            "architecture": self.architecture().ok(),
            "version": self.version,
            "tensor_count": self.tensors.len(),
            "file_size": self.file_size,
            "types": self.type_counts(),
            "metadata": metadata,
        })
    }
}

#[cfg(test)]
mod tests;
