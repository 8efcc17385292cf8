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
use std::sync::Arc;

use burn::tensor::Tensor;

/// Positions a layer's buffers grow by when full on a GPU: a copy of the valid prefix every
/// this many tokens, and at most this many unused positions (MedGemma 4B: 272 KiB per position
/// over its 34 layers, so ≤ 70 MB). The CPU path grows them to the exact length, as `cat` did:
/// a 4B pair there sits a few hundred MB under wasm32's 4 GiB ([`super::footprint`] counts
/// its working memory with exact caches), and a copy costs it no dispatch.
const GROW: usize = 256;

/// Spare positions a branch's cache gets on a GPU after a batched pass: a reply stopped at its
/// official letter takes a few tokens; a longer one grows the buffers as any cache does.
const BRANCH_ROOM: usize = 64;

/// One layer's keys and values: `[kv_heads, capacity, head_dim]` buffers whose first `len`
/// positions are valid.
#[derive(Debug, Clone)]
pub(super) struct LayerKv {
    k: Tensor<3>,
    v: Tensor<3>,
    len: usize,
    /// One count per pair of buffers, shared by the clones that share them: more than one
    /// holder means a write must copy first. Ours rather than the runtime's handle count
    /// (`can_mut`), which also counts the device thread's own reference for as long as it takes
    /// to bind a fresh allocation, so whether a copy was made (a dispatch) depended on timing.
    holders: Arc<()>,
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
                holders: Arc::new(()),
            });
            return (k, v, 0);
        }
        let (kb, vb, len, holders) = Self::reserve(slot, [h, t, d], &k.device());
        let kb = kb.slice_assign([0..h, len..len + t, 0..d], k);
        let vb = vb.slice_assign([0..h, len..len + t, 0..d], v);
        Self::commit(slot, (kb, vb, holders), len, t)
    }

    /// [`LayerKv::append`] where `write` stores the new `t` positions itself: it receives the
    /// key and value buffers (`[kv_heads, capacity, head_dim]`, room for `t` more after the
    /// valid positions, which it is given) and returns them written, with whatever else it
    /// computed. The fused q/k norm + RoPE kernel writes the cache this way, in its own
    /// dispatch, in place: the buffers it receives are this slot's alone.
    pub(super) fn append_with<R>(
        slot: &mut Option<LayerKv>,
        [h, t, d]: [usize; 3],
        device: &burn::tensor::Device,
        write: impl FnOnce(Tensor<3>, Tensor<3>, usize) -> (Tensor<3>, Tensor<3>, R),
    ) -> (Tensor<3>, Tensor<3>, usize, R) {
        let (kb, vb, len, holders) = Self::reserve(slot, [h, t, d], device);
        let (kb, vb, r) = write(kb, vb, len);
        let (k, v, q0) = Self::commit(slot, (kb, vb, holders), len, t);
        (k, v, q0, r)
    }

    /// Takes `slot`'s buffers with room for `t` more positions and no other holder, the number
    /// of valid positions and the buffers' count of holders. Full buffers grow into new ones; a
    /// clone's shared ones are copied into buffers of the same capacity.
    fn reserve(
        slot: &mut Option<LayerKv>,
        [h, t, d]: [usize; 3],
        device: &burn::tensor::Device,
    ) -> (Tensor<3>, Tensor<3>, usize, Arc<()>) {
        let gpu = crate::device::queues_work(device);
        let grow = if gpu { GROW } else { 1 };
        match slot.take() {
            Some(l) if l.len + t <= l.k.dims()[1] && Arc::strong_count(&l.holders) == 1 => {
                (l.k, l.v, l.len, l.holders)
            }
            prior => {
                let len = prior.as_ref().map_or(0, |l| l.len);
                let cap = match &prior {
                    Some(l) if len + t <= l.k.dims()[1] => l.k.dims()[1],
                    _ => (len + t).div_ceil(grow) * grow,
                };
                // Positions past `len` are never read (views stop there), so they are left
                // unwritten rather than zeroed: one dispatch fewer per growth.
                let moved = |old: Option<Tensor<3>>| match old {
                    // One dispatch that allocates and copies: burn's `slice_assign` into a fresh
                    // buffer asks the runtime's handle count whether to copy it first, which
                    // now and then said yes (see `holders`).
                    Some(o) if len > 0 && gpu => {
                        crate::kernels::buffers::copy_positions(o, len, cap)
                    }
                    Some(o) if len > 0 => Tensor::<3>::empty([h, cap, d], device)
                        .slice_assign([0..h, 0..len, 0..d], o.slice([0..h, 0..len, 0..d])),
                    _ => Tensor::<3>::empty([h, cap, d], device),
                };
                let (pk, pv) = prior.map_or((None, None), |l| (Some(l.k), Some(l.v)));
                (moved(pk), moved(pv), len, Arc::new(()))
            }
        }
    }

    /// One branch's copy of this layer after a batched pass ([`KvCache::branch_of`]): the first
    /// `prefix` positions, then positions `own` (not the other branches' before them). On a GPU
    /// with [`BRANCH_ROOM`] positions to decode into (two dispatches a buffer), on the CPU fitted
    /// to its length.
    pub(super) fn branch(&self, prefix: usize, own: Range<usize>) -> LayerKv {
        let n = prefix + own.len();
        let part = |t: &Tensor<3>| {
            let [h, _, d] = t.dims();
            let tail = t.clone().slice([0..h, own.clone(), 0..d]);
            if crate::device::queues_work(&t.device()) {
                let cap = n + BRANCH_ROOM;
                let head = match prefix {
                    0 => Tensor::<3>::empty([h, cap, d], &t.device()),
                    _ => crate::kernels::buffers::copy_positions(t.clone(), prefix, cap),
                };
                return crate::kernels::buffers::write_positions(head, prefix, tail, own.len());
            }
            if prefix == 0 {
                return tail;
            }
            Tensor::cat(vec![t.clone().slice([0..h, 0..prefix, 0..d]), tail], 1)
        };
        LayerKv {
            k: part(&self.k),
            v: part(&self.v),
            len: n,
            holders: Arc::new(()),
        }
    }

    /// Puts written buffers back into `slot` with positions `0..len + t` valid; returns views
    /// of them and `len`.
    fn commit(
        slot: &mut Option<LayerKv>,
        (kb, vb, holders): (Tensor<3>, Tensor<3>, Arc<()>),
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
            holders,
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
    /// would take the page that the layer before had just freed from its MLP product, and the
    /// next product would allocate that page anew: a study's four questions batched left pages
    /// of the MLP product's size reserved and empty, far above native's peak
    /// (`examples/pool_memory.rs`; bench/results/ci-vm-2core-pool-memory-study-dry-run.json).
    /// Before the pass, only the free pages of earlier passes are there to take.
    pub(super) fn reserve(&mut self, t: usize, [h, d]: [usize; 2], device: &burn::tensor::Device) {
        if !crate::device::queues_work(device) {
            return;
        }
        for slot in &mut self.layers {
            let (k, v, len, holders) = LayerKv::reserve(slot, [h, t, d], device);
            *slot = Some(LayerKv { k, v, len, holders });
        }
    }

    /// An empty cache for one branch of a batched pass over `prefix` (the same layers): `len`
    /// positions and the image `spans` it sees once [`LayerKv::branch`] fills its layers.
    pub(super) fn branch_of(prefix: &KvCache, len: usize, spans: Vec<Range<usize>>) -> KvCache {
        KvCache {
            layers: vec![None; prefix.layers.len()],
            len,
            image_spans: spans,
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
    /// the shared buffers copied before a write) and on the CPU (exact buffers).
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

    /// A branch of a batched pass holds the pass's prefix, then its own positions (not the
    /// other branches' before them), and appends after them without touching the pass's buffers.
    #[test]
    fn a_branch_holds_the_prefix_then_its_own_positions() {
        let gpu = crate::device::wgpu().expect("a wgpu adapter (lavapipe)");
        for dev in [gpu, crate::device::cpu()] {
            let rows = |n| Tensor::<3>::random([2, n, 8], Distribution::Default, &dev);
            let (prefix, other, own, next) = (rows(5), rows(3), rows(4), rows(1));
            let mut cache = KvCache::new(1);
            for x in [&prefix, &other, &own] {
                LayerKv::append(&mut cache.layers[0], x.clone(), x.clone() * 2.0);
            }
            cache.len = 12;
            let mut branch = cache.layers[0].as_ref().map(|l| l.branch(5, 8..12));
            assert_eq!(branch.as_ref().map(|l| l.len), Some(9));
            let (k, v, q0) = LayerKv::append(&mut branch, next.clone(), next.clone());
            assert_eq!(q0, 9);
            let want = Tensor::cat(vec![prefix.clone(), own.clone(), next.clone()], 1);
            assert_eq!(values(k), values(want.clone()));
            let want_v = Tensor::cat(vec![prefix.clone() * 2.0, own.clone() * 2.0, next], 1);
            assert_eq!(values(v), values(want_v));
            let pass = cache.layers[0]
                .as_ref()
                .map(|l| l.k.clone().slice([0..2, 0..12, 0..8]));
            assert_eq!(
                values(pass.unwrap()),
                values(Tensor::cat(vec![prefix, other, own], 1))
            );
        }
    }

    /// The fused q/k kernel writes the buffers `append_with` hands it in place, so a clone that
    /// shares them (a study's cached prefix, with room left) must be handed copies: both sides
    /// then append their own position and each reads back only its own, whichever wrote first.
    /// The views are read after both writes, so a write into the other side's buffer shows.
    #[test]
    fn fused_writes_into_a_cloned_cache_stay_on_their_side() {
        let dev = crate::device::wgpu().expect("a wgpu adapter (lavapipe)");
        let (kv_heads, d) = (2, 8);
        let rows = |n| Tensor::<3>::random([kv_heads, n, d], Distribution::Default, &dev);
        // 201 positions in a buffer of 256: room for the next without growing.
        let first = [rows(200), rows(1)];
        let prefix = Tensor::cat(first.to_vec(), 1);
        let mut ours = None;
        for x in &first {
            LayerKv::append(&mut ours, x.clone(), x.clone());
        }
        assert_eq!(ours.as_ref().map(|l| l.k.dims()[1]), Some(256));
        let mut fork = ours.clone();
        let norms = Tensor::<1>::ones([2 * d], &dev);
        let table = crate::model::nn::rope_table(&[201], d, 1e4, 1.0, &dev);
        let mut views = Vec::new();
        for (slot, value) in [(&mut ours, 1.0), (&mut fork, 2.0)] {
            // One query head, then keys, then values; the kernel stores the values as given.
            let qkv = Tensor::<2>::full([1, (1 + 2 * kv_heads) * d], value, &dev);
            let (_, v, q0, _) =
                LayerKv::append_with(slot, [kv_heads, 1, d], &dev, |kb, vb, pos| {
                    let (q, kb, vb) = crate::kernels::rows::qk_norm_rope_store(
                        qkv,
                        [1, kv_heads, d],
                        &norms,
                        &table,
                        (kb, vb),
                        pos,
                        1e-6,
                    );
                    (kb, vb, q)
                });
            assert_eq!(q0, 201);
            views.push((v, value));
        }
        for (v, value) in views {
            let new = Tensor::<3>::full([kv_heads, 1, d], value, &dev);
            let (got, want) = (values(v), values(Tensor::cat(vec![prefix.clone(), new], 1)));
            let at = 201 * d..202 * d;
            assert!(
                got == want,
                "the side that wrote {value} reads {:?} at its new position",
                &got[at]
            );
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
