//! GGUF metadata values and their JSON summary.

use serde_json::{Value as Json, json};

/// One metadata value (GGUF value types 0..=12).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A homogeneous metadata array.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

/// The GGUF value type ids, in spec order.
pub(crate) const TYPE_NAMES: [&str; 13] = [
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
];

impl Value {
    /// The GGUF name of this value's type (`u32`, `string`, `array`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }

    /// The value as an unsigned integer, for any integer type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, for float types and integers that convert exactly.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            _ => self.as_u64().filter(|v| *v < (1 << 53)).map(|v| v as f64),
        }
    }

    /// JSON with arrays summarised (type, length and the first few items), for `inspect`.
    pub fn summary(&self) -> Json {
        match self {
            Value::U8(v) => json!(v),
            Value::I8(v) => json!(v),
            Value::U16(v) => json!(v),
            Value::I16(v) => json!(v),
            Value::U32(v) => json!(v),
            Value::I32(v) => json!(v),
            Value::F32(v) => json!(v),
            Value::Bool(v) => json!(v),
            Value::String(v) => json!(v),
            Value::U64(v) => json!(v),
            Value::I64(v) => json!(v),
            Value::F64(v) => json!(v),
            Value::Array(a) => a.summary(),
        }
    }
}

/// Items shown at the head of a summarised array.
const SUMMARY_HEAD: usize = 8;

impl Array {
    /// Number of items.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether the array has no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF name of the element type.
    pub fn element_type(&self) -> &'static str {
        match self {
            Array::U8(_) => "u8",
            Array::I8(_) => "i8",
            Array::U16(_) => "u16",
            Array::I16(_) => "i16",
            Array::U32(_) => "u32",
            Array::I32(_) => "i32",
            Array::F32(_) => "f32",
            Array::Bool(_) => "bool",
            Array::String(_) => "string",
            Array::Array(_) => "array",
            Array::U64(_) => "u64",
            Array::I64(_) => "i64",
            Array::F64(_) => "f64",
        }
    }

    fn head(&self) -> Json {
        fn take<T: serde::Serialize>(v: &[T]) -> Json {
            json!(&v[..v.len().min(SUMMARY_HEAD)])
        }
        match self {
            Array::U8(v) => take(v),
            Array::I8(v) => take(v),
            Array::U16(v) => take(v),
            Array::I16(v) => take(v),
            Array::U32(v) => take(v),
            Array::I32(v) => take(v),
            Array::F32(v) => take(v),
            Array::Bool(v) => take(v),
            Array::String(v) => take(v),
            Array::U64(v) => take(v),
            Array::I64(v) => take(v),
            Array::F64(v) => take(v),
            Array::Array(v) => {
                Json::Array(v.iter().take(SUMMARY_HEAD).map(Array::summary).collect())
            }
        }
    }

    /// `{"type":"array","element_type":..,"len":..,"head":[..]}`.
    pub fn summary(&self) -> Json {
        json!({
            "type": "array",
            "element_type": self.element_type(),
            "len": self.len(),
            "head": self.head(),
        })
    }
}
