//! ggml tensor element types and their block geometry.

use std::fmt;

/// A ggml tensor type as stored in a GGUF tensor index.
///
/// Every id ggml defines is named so that an unsupported type is reported by name; only the
/// types in [`GgmlType::is_supported`] can be dequantised by this engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types, missing_docs)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
}

/// (type, ggml id, weights per block, bytes per block) — ref: ggml/src/ggml.c `type_traits`.
const TABLE: [(GgmlType, u32, u32, u32); 32] = [
    (GgmlType::F32, 0, 1, 4),
    (GgmlType::F16, 1, 1, 2),
    (GgmlType::Q4_0, 2, 32, 18),
    (GgmlType::Q4_1, 3, 32, 20),
    (GgmlType::Q5_0, 6, 32, 22),
    (GgmlType::Q5_1, 7, 32, 24),
    (GgmlType::Q8_0, 8, 32, 34),
    (GgmlType::Q8_1, 9, 32, 36),
    (GgmlType::Q2_K, 10, 256, 84),
    (GgmlType::Q3_K, 11, 256, 110),
    (GgmlType::Q4_K, 12, 256, 144),
    (GgmlType::Q5_K, 13, 256, 176),
    (GgmlType::Q6_K, 14, 256, 210),
    (GgmlType::Q8_K, 15, 256, 292),
    (GgmlType::IQ2_XXS, 16, 256, 66),
    (GgmlType::IQ2_XS, 17, 256, 74),
    (GgmlType::IQ3_XXS, 18, 256, 98),
    (GgmlType::IQ1_S, 19, 256, 50),
    (GgmlType::IQ4_NL, 20, 32, 18),
    (GgmlType::IQ3_S, 21, 256, 110),
    (GgmlType::IQ2_S, 22, 256, 82),
    (GgmlType::IQ4_XS, 23, 256, 136),
    (GgmlType::I8, 24, 1, 1),
    (GgmlType::I16, 25, 1, 2),
    (GgmlType::I32, 26, 1, 4),
    (GgmlType::I64, 27, 1, 8),
    (GgmlType::F64, 28, 1, 8),
    (GgmlType::IQ1_M, 29, 256, 56),
    (GgmlType::BF16, 30, 1, 2),
    (GgmlType::TQ1_0, 34, 256, 54),
    (GgmlType::TQ2_0, 35, 256, 66),
    (GgmlType::MXFP4, 39, 32, 17),
];

impl GgmlType {
    /// Looks a type up by its ggml id.
    pub fn from_id(id: u32) -> Option<Self> {
        TABLE.iter().find(|row| row.1 == id).map(|row| row.0)
    }

    fn row(self) -> &'static (GgmlType, u32, u32, u32) {
        TABLE
            .iter()
            .find(|row| row.0 == self)
            .expect("every GgmlType variant has a row in TABLE")
    }

    /// The ggml id written in GGUF files.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Weights per block (1 for plain float and integer types).
    pub fn block_size(self) -> u64 {
        u64::from(self.row().2)
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        u64::from(self.row().3)
    }

    /// Whether this engine can dequantise the type.
    pub fn is_supported(self) -> bool {
        matches!(
            self,
            GgmlType::F32
                | GgmlType::F16
                | GgmlType::BF16
                | GgmlType::Q4_0
                | GgmlType::Q5_0
                | GgmlType::Q8_0
                | GgmlType::Q4_K
                | GgmlType::Q5_K
                | GgmlType::Q6_K
                | GgmlType::Q4_1
                | GgmlType::Q5_1
                | GgmlType::Q2_K
                | GgmlType::Q3_K
                | GgmlType::IQ4_NL
                | GgmlType::IQ4_XS
                | GgmlType::IQ2_XXS
                | GgmlType::IQ2_XS
                | GgmlType::IQ2_S
                | GgmlType::IQ3_XXS
                | GgmlType::IQ3_S
        )
    }

    /// Bytes taken by `n` weights, or `None` when `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }

    /// Every type ggml defines, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|row| row.0)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        for ty in GgmlType::all() {
            assert_eq!(GgmlType::from_id(ty.id()), Some(ty));
        }
        assert_eq!(
            GgmlType::from_id(4),
            None,
            "id 4 (old Q4_2) was removed from ggml"
        );
        assert_eq!(GgmlType::from_id(1000), None);
    }

    #[test]
    fn byte_counts_follow_blocks() {
        assert_eq!(GgmlType::Q4_K.bytes_for(512), Some(288));
        assert_eq!(GgmlType::Q6_K.bytes_for(256), Some(210));
        assert_eq!(GgmlType::Q8_0.bytes_for(64), Some(68));
        assert_eq!(GgmlType::Q8_0.bytes_for(33), None);
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
    }
}
