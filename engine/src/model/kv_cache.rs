//! The decoder's KV cache: immutable weights stay in [`super::Decoder`], the state of one
//! conversation lives here and is passed `&mut` (burn-lm's layout).

use std::ops::Range;

use burn::tensor::Tensor;

/// Keys and values of every layer for the positions seen so far.
#[derive(Debug, Clone)]
pub struct KvCache {
    /// Per layer, keys and values `[kv_heads, len, head_dim]` (`None` before the first token).
    pub(super) layers: Vec<Option<(Tensor<3>, Tensor<3>)>>,
    /// Positions already in the cache.
    pub len: usize,
    /// Absolute position ranges of image soft tokens (each attends bidirectionally within).
    pub(super) image_spans: Vec<Range<usize>>,
}

impl KvCache {
    /// An empty cache for `layers` layers.
    pub fn new(layers: usize) -> KvCache {
        KvCache {
            layers: vec![None; layers],
            len: 0,
            image_spans: Vec::new(),
        }
    }

    /// Keeps the first `len` positions. The cut must not fall inside an image run: those
    /// positions attend to later image tokens, so their keys would be wrong without them.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        for l in self.layers.iter_mut() {
            *l = if len == 0 {
                None
            } else {
                l.take().map(|(k, v)| {
                    let [h, _, d] = k.dims();
                    (k.slice([0..h, 0..len, 0..d]), v.slice([0..h, 0..len, 0..d]))
                })
            };
        }
        self.image_spans.retain(|s| s.end <= len);
        self.len = len;
    }
}
