//! The decoder's KV cache: immutable weights stay in [`super::Decoder`], the state of one
//! conversation lives here and is passed `&mut` (burn-lm's layout).
//!
//! Each layer keeps its keys and values in buffers with spare positions, so a token writes
//! only its own rows and attention reads the valid prefix through a view. On a GPU the fused
//! q/k norm + RoPE kernel writes them as it computes them ([`LayerKv::append_with`]: no
//! dispatch of its own); otherwise one in-place `slice_assign` each ([`LayerKv::append`]).
//! Appending by `Tensor::cat` rewrote the whole cache every token: O(length) traffic and four
//! dispatches per layer.

use std::ops::Range;

use burn::tensor::Tensor;

/// Positions a layer's buffers grow by when full on a GPU: a copy of the valid prefix every
/// this many tokens, and at most this many unused positions (MedGemma 4B: 272 KiB per position
/// over its 34 layers, so ≤ 70 MB). The CPU path grows them to the exact length, as `cat` did:
/// a 4B pair there sits a few hundred MB under wasm32's 4 GiB ([`super::footprint`] counts
/// its working memory with exact caches), and a copy costs it no dispatch.
const GROW: usize = 256;

/// One layer's keys and values: `[kv_heads, capacity, head_dim]` buffers whose first `len`
/// positions are valid.
#[derive(Debug, Clone)]
pub(super) struct LayerKv {
    k: Tensor<3>,
    v: Tensor<3>,
    len: usize,
}

impl LayerKv {
    /// Writes `k` and `v` (`[kv_heads, t, head_dim]`) after the valid positions of `slot`,
    /// growing its buffers when they are full, and returns views of every valid position with
    /// the number that were there before.
    ///
    /// The write is in place when `slot` holds the only reference to its buffers; a clone of the
    /// cache (a study's cached prefix) shares them, and its first write copies them instead, so
    /// neither sees the other's positions.
    pub(super) fn append(
        slot: &mut Option<LayerKv>,
        k: Tensor<3>,
        v: Tensor<3>,
    ) -> (Tensor<3>, Tensor<3>, usize) {
        let [h, t, d] = k.dims();
        // The first rows are kept as they come, with no spare position: a pass that is never
        // continued (a study's shared prefix, the CPU) then writes nothing, and the next
        // append grows them into buffers with room, as it would have copied them anyway.
        if slot.is_none() {
            *slot = Some(LayerKv {
                k: k.clone(),
                v: v.clone(),
                len: t,
            });
            return (k, v, 0);
        }
        let (kb, vb, len) = Self::reserve(slot, [h, t, d], &k.device());
        let kb = kb.slice_assign([0..h, len..len + t, 0..d], k);
        let vb = vb.slice_assign([0..h, len..len + t, 0..d], v);
        Self::commit(slot, kb, vb, len, t)
    }

    /// [`LayerKv::append`] where `write` stores the new `t` positions itself: it receives the
    /// key and value buffers (`[kv_heads, capacity, head_dim]`, room for `t` more after the
    /// valid positions, which it is given) and returns them written, with whatever else it
    /// computed. The fused q/k norm + RoPE kernel writes the cache this way, in its own
    /// dispatch. Buffers shared with a clone must be copied before being written
    /// (`kernels::rows` does).
    pub(super) fn append_with<R>(
        slot: &mut Option<LayerKv>,
        [h, t, d]: [usize; 3],
        device: &burn::tensor::Device,
        write: impl FnOnce(Tensor<3>, Tensor<3>, usize) -> (Tensor<3>, Tensor<3>, R),
    ) -> (Tensor<3>, Tensor<3>, usize, R) {
        let (kb, vb, len) = Self::reserve(slot, [h, t, d], device);
        let (kb, vb, r) = write(kb, vb, len);
        let (k, v, q0) = Self::commit(slot, kb, vb, len, t);
        (k, v, q0, r)
    }

    /// Takes `slot`'s buffers with room for `t` more positions, growing them into new ones when
    /// they are full, and the number of valid positions.
    fn reserve(
        slot: &mut Option<LayerKv>,
        [h, t, d]: [usize; 3],
        device: &burn::tensor::Device,
    ) -> (Tensor<3>, Tensor<3>, usize) {
        match slot.take() {
            Some(l) if l.len + t <= l.k.dims()[1] => (l.k, l.v, l.len),
            prior => {
                let len = prior.as_ref().map_or(0, |l| l.len);
                let grow = if crate::device::queues_work(device) {
                    GROW
                } else {
                    1
                };
                let cap = (len + t).div_ceil(grow) * grow;
                // Positions past `len` are never read (views stop there), so they are left
                // unwritten rather than zeroed: one dispatch fewer per growth.
                let regrow = |old: Option<Tensor<3>>| {
                    let fresh = Tensor::<3>::empty([h, cap, d], device);
                    match old {
                        Some(o) if len > 0 => {
                            fresh.slice_assign([0..h, 0..len, 0..d], o.slice([0..h, 0..len, 0..d]))
                        }
                        _ => fresh,
                    }
                };
                let (pk, pv) = prior.map_or((None, None), |l| (Some(l.k), Some(l.v)));
                (regrow(pk), regrow(pv), len)
            }
        }
    }

    /// Puts written buffers back into `slot` with positions `0..len + t` valid; returns views
    /// of them and `len`.
    fn commit(
        slot: &mut Option<LayerKv>,
        kb: Tensor<3>,
        vb: Tensor<3>,
        len: usize,
        t: usize,
    ) -> (Tensor<3>, Tensor<3>, usize) {
        let [h, _, d] = kb.dims();
        let end = len + t;
        let views = (
            kb.clone().slice([0..h, 0..end, 0..d]),
            vb.clone().slice([0..h, 0..end, 0..d]),
        );
        *slot = Some(LayerKv {
            k: kb,
            v: vb,
            len: end,
        });
        (views.0, views.1, len)
    }
}

/// Keys and values of every layer for the positions seen so far.
#[derive(Debug, Clone)]
pub struct KvCache {
    /// Per layer (`None` before the first token).
    pub(super) layers: Vec<Option<LayerKv>>,
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

    /// Gives every layer room for `t` more positions, in buffers of this cache's own (a
    /// clone's shared buffers copied), before a pass's first product (GPU devices; the CPU's
    /// buffers grow as each layer appends).
    ///
    /// Why before: CubeCL's pool on wasm hands a free page to any smaller allocation whose own
    /// size class has none free, and a KV buffer outlives many passes. Grown layer by layer, each
    /// took the page that the layer before had just freed from its MLP product, and the next
    /// product allocated that page anew: a study's four questions batched (1,272 rows) left 22
    /// pages of 104 MB reserved in the browser's pool for MedGemma 4B (7.4 GB at the peak,
    /// against 4.3 natively; `examples/pool_memory.rs`). Before the pass, only the free pages of
    /// earlier passes are there to take.
    pub(super) fn reserve(&mut self, t: usize, [h, d]: [usize; 2], device: &burn::tensor::Device) {
        if !crate::device::queues_work(device) {
            return;
        }
        for slot in &mut self.layers {
            let (k, v, len) = LayerKv::reserve(slot, [h, t, d], device);
            *slot = Some(LayerKv {
                k: crate::kernels::rows::unshared(k),
                v: crate::kernels::rows::unshared(v),
                len,
            });
        }
    }

    /// Keeps the first `len` positions. The cut must not fall inside an image run: those
    /// positions attend to later image tokens, so their keys would be wrong without them.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        for l in self.layers.iter_mut() {
            match l {
                Some(kv) if len > 0 => kv.len = len,
                _ => *l = None,
            }
        }
        self.image_spans.retain(|s| s.end <= len);
        self.len = len;
    }
}

#[cfg(test)]
mod tests {
    use super::{KvCache, LayerKv};
    use burn::tensor::{Distribution, Tensor};

    fn values(t: Tensor<3>) -> Vec<f32> {
        t.into_data().try_into_vec::<f32>().unwrap()
    }

    /// Appends across a growth, then two clones that each append their own token: every view
    /// holds exactly the rows written to it, on the GPU (spare positions, in-place writes,
    /// copy on write for the shared buffers) and on the CPU (exact buffers).
    #[test]
    fn appends_grow_and_clones_do_not_see_each_others_tokens() {
        let gpu = crate::device::wgpu().expect("a wgpu adapter (lavapipe)");
        for dev in [gpu, crate::device::cpu()] {
            let rows = |n| Tensor::<3>::random([2, n, 8], Distribution::Default, &dev);
            let (a, b, c, d) = (rows(200), rows(100), rows(1), rows(1));
            let mut slot = None;
            let (k, _, q0) = LayerKv::append(&mut slot, a.clone(), a.clone() * 2.0);
            assert_eq!((k.dims(), q0), ([2, 200, 8], 0));
            let (k, v, q0) = LayerKv::append(&mut slot, b.clone(), b.clone() * 2.0);
            assert_eq!((k.dims(), q0), ([2, 300, 8], 200));
            let ab = Tensor::cat(vec![a, b], 1);
            assert_eq!(values(k), values(ab.clone()));
            assert_eq!(values(v), values(ab.clone() * 2.0));
            let mut fork = slot.clone();
            let (k1, _, _) = LayerKv::append(&mut slot, c.clone(), c.clone());
            let (k2, _, q0) = LayerKv::append(&mut fork, d.clone(), d.clone());
            assert_eq!(q0, 300);
            assert_eq!(values(k1), values(Tensor::cat(vec![ab.clone(), c], 1)));
            assert_eq!(values(k2), values(Tensor::cat(vec![ab, d], 1)));
        }
    }

    /// A pass's reservation grows every layer at once, gives a cloned cache buffers of its own,
    /// and leaves the valid positions as they were: the clone and the original then each append
    /// their own rows and see only those. Both ways: buffers that must grow, and buffers with
    /// room that the clone shares.
    #[test]
    fn reserving_before_a_pass_keeps_clones_apart() {
        let gpu = crate::device::wgpu().expect("a wgpu adapter (lavapipe)");
        for dev in [gpu, crate::device::cpu()] {
            let gpu_side = crate::device::queues_work(&dev);
            let rows = |n| Tensor::<3>::random([2, n, 8], Distribution::Default, &dev);
            // 200 rows (kept as they come), then 1 (grown to 256 positions on the GPU).
            let first = [rows(200), rows(1)];
            let prefix = Tensor::cat(first.to_vec(), 1);
            let mut cache = KvCache::new(2);
            for slot in &mut cache.layers {
                for x in &first {
                    LayerKv::append(slot, x.clone(), x.clone() * 2.0);
                }
            }
            cache.len = 201;
            for (t, capacity) in [(50, 256), (100, 512)] {
                let mut ours = cache.clone();
                let mut fork = cache.clone();
                ours.reserve(t, [2, 8], &dev);
                fork.reserve(t, [2, 8], &dev);
                let got = ours.layers[1].as_ref().map(|l| (l.k.dims()[1], l.len));
                assert_eq!(got, Some((if gpu_side { capacity } else { 201 }, 201)));
                for c in [&mut ours, &mut fork] {
                    let new = rows(t);
                    for slot in &mut c.layers {
                        let (k, v, q0) = LayerKv::append(slot, new.clone(), new.clone() * 2.0);
                        let want = Tensor::cat(vec![prefix.clone(), new.clone()], 1);
                        assert_eq!(q0, 201);
                        assert_eq!(values(k), values(want.clone()));
                        assert_eq!(values(v), values(want * 2.0));
                    }
                }
            }
        }
    }
}
