//! What a model pair occupies on the CPU path, from the GGUF headers alone: a browser's wasm32
//! memory ends at 4 GiB, so a pair that cannot fit is refused before its first weight is
//! allocated, with the arithmetic, instead of crashing the tab half-way through a load.

use crate::gguf::Gguf;
use crate::quant::pack::row_words;

/// The most memory a wasm32 instance can address (and Chromium grants): 4 GiB.
pub const WASM32_MAX_BYTES: u64 = 4 << 30;

/// Memory the CPU path uses beyond the weights while it answers: the code and the tokenizer,
/// the vision tower's activations (4,096 patches × 1,152 wide, attention in 32 MiB score
/// blocks), the KV cache of a question with its image and a study's cached copy, and the
/// dequantised row blocks of the prefill GEMMs. Measured (bench/browser-fullsize.mjs, CPU path,
/// synthetic MedGemma 4B pair, two questions of a study;
/// bench/results/ci-vm-2core-medgemma4b-synthetic-browser.json): wasm memory 3.823 GB at its
/// peak for 3.344 GB of weights, so 480 MB; 512 MiB keeps 12% above that.
pub const CPU_WORKING_BYTES: u64 = 512 << 20;

/// A pair's memory on the CPU path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// The weights as the CPU path holds them: block-quantised rows padded to whole words,
    /// vectors (norms, biases) as f32.
    pub weights: u64,
    /// Everything else at its peak ([`CPU_WORKING_BYTES`]).
    pub working: u64,
}

impl Footprint {
    /// The pair `text` (+ `mmproj`) on the CPU path.
    pub fn cpu(text: &Gguf, mmproj: Option<&Gguf>) -> Footprint {
        let weights = std::iter::once(text)
            .chain(mmproj)
            .flat_map(|g| &g.tensors)
            .map(|t| {
                if t.dims.iter().filter(|&&d| d > 1).count() <= 1 {
                    t.n_elements() * 4
                } else {
                    t.n_rows() * row_words(t.ty, t.row_len() as usize) as u64 * 4
                }
            })
            .sum();
        Footprint {
            weights,
            working: CPU_WORKING_BYTES,
        }
    }

    /// Weights and working memory together.
    pub fn total(&self) -> u64 {
        self.weights + self.working
    }

    /// Whether it fits in `limit` bytes, and if not, the sentence that says why.
    pub fn check(&self, limit: u64) -> Result<(), TooLarge> {
        if self.total() <= limit {
            Ok(())
        } else {
            Err(TooLarge {
                footprint: *self,
                limit,
            })
        }
    }
}

/// A pair too large for the CPU path's memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this model pair needs about {} of WebAssembly memory on the CPU path ({} of weights + {} to \
     run), and the browser allows at most {}: run it on WebGPU (Model tab, \"Run the model on\"), \
     or pick a smaller quantisation",
    crate::storage::human_bytes(footprint.total() as f64),
    crate::storage::human_bytes(footprint.weights as f64),
    crate::storage::human_bytes(footprint.working as f64),
    crate::storage::human_bytes(*limit as f64)
)]
pub struct TooLarge {
    /// What the pair needs.
    pub footprint: Footprint,
    /// What the browser allows.
    pub limit: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::write::{TensorData, Writer};
    use crate::gguf::{GgmlType, SliceSource};

    fn gguf(tensors: &[(&str, Vec<u64>, GgmlType)]) -> Gguf {
        let mut w = Writer::new();
        for (name, dims, ty) in tensors {
            let n = dims.iter().product::<u64>() as usize;
            w = w.tensor(TensorData {
                name: (*name).into(),
                dims: dims.clone(),
                ty: *ty,
                bytes: crate::quant::random_blocks(*ty, n, 1),
            });
        }
        Gguf::read(&mut SliceSource(w.to_bytes())).unwrap()
    }

    #[test]
    fn weights_count_padded_blocks_and_f32_vectors() {
        let text = gguf(&[
            // Q6_K: 210-byte blocks padded to 212; two rows of 512 = 2 blocks each.
            ("a.weight", vec![512, 2], GgmlType::Q6_K),
            // A norm: held as f32 whatever its file type.
            ("n.weight", vec![512], GgmlType::F16),
        ]);
        let mm = gguf(&[("m.weight", vec![64, 3], GgmlType::Q8_0)]);
        let f = Footprint::cpu(&text, Some(&mm));
        // 2·2·212 + 512·4 + 3·2·36 (Q8_0: 34 → 36 bytes per 32 weights).
        assert_eq!(f.weights, 848 + 2048 + 216);
        assert_eq!(f.working, CPU_WORKING_BYTES);
    }

    #[test]
    fn a_pair_over_the_limit_is_refused_with_the_arithmetic() {
        let f = Footprint {
            weights: 4_100_000_000,
            working: 500_000_000,
        };
        assert!(f.check(5_000_000_000).is_ok());
        let msg = f.check(WASM32_MAX_BYTES).unwrap_err().to_string();
        assert!(
            msg.contains("needs about 4.6 GB of WebAssembly memory on the CPU path (4.1 GB of weights + 500.0 MB to run), and the browser allows at most 4.3 GB"),
            "{msg}"
        );
        assert!(msg.contains("WebGPU"), "{msg}");
    }
}
