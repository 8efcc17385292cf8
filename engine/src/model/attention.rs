//! Scaled dot-product attention: the dispatch between the fused GPU kernels
//! ([`crate::kernels::attention`]) and blocked GEMMs (the CPU), GQA head expansion, and the
//! decoder's segmented form in which several independent continuations of one cache share a pass.

use std::ops::Range;

use burn::tensor::activation::softmax;
use burn::tensor::{Int, Tensor};

pub use crate::kernels::attention::{Kernel, Mask};

/// Rows of queries processed at once in attention, so the score matrix of one block stays
/// well under a storage-buffer binding (128 MiB on many WebGPU adapters).
const SCORE_BLOCK_BYTES: usize = 32 << 20;

/// How far past its own position a query may see under [`mask_values`] with these spans: the
/// longest span but one (every span, not only the queries', keeps it simple and safe).
pub fn lookahead(spans: &[Range<usize>]) -> usize {
    spans
        .iter()
        .map(|r| r.len().saturating_sub(1))
        .max()
        .unwrap_or(0)
}

/// Scaled dot-product attention with an optional additive mask: on GPU devices the fused
/// kernel (heads up to 128 wide), else the decode kernel (a few rows, heads up to 256 wide),
/// else the wide-head kernel (more rows, heads up to 256 wide); blocked GEMMs on the CPU and for
/// the rest.
///
/// # Shapes
/// - `q`: `[heads, t, d]`, `k`, `v`: `[heads / groups, s, d]`
/// - `mask`: `[t, s]` with 0 or −∞
/// - returns `[heads, t, d]`
pub fn attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    mask: Option<Mask>,
    groups: usize,
    scale: f32,
) -> Tensor<3> {
    let [_, t, d] = q.dims();
    for kernel in [Kernel::Fused, Kernel::Decode, Kernel::Wide] {
        if kernel.supports(&q.device(), t, d) {
            return kernel.run(q, k, v, mask, groups, scale);
        }
    }
    let mask = mask.map(|m| m.values);
    blocked_attention(q, expand_kv(k, groups), expand_kv(v, groups), mask, scale)
}

/// Additive attention mask for queries at `q0..q0+t` over keys `0..q0+t` (0 = attend, −∞ = not).
///
/// ref: transformers 5 `create_masks_for_vision_model`: global layers allow
/// `causal OR same-image`; sliding layers allow `(causal OR same-image) AND k > q − window`.
pub fn mask_values(q0: usize, t: usize, spans: &[Range<usize>], window: Option<usize>) -> Vec<f32> {
    let s = q0 + t;
    let span_of = |p: usize| spans.iter().position(|r| r.contains(&p));
    let mut m = vec![0f32; t * s];
    for qi in 0..t {
        let q = q0 + qi;
        let qs = span_of(q);
        for k in 0..s {
            let visible = k <= q || (qs.is_some() && qs == span_of(k));
            let in_window = window.is_none_or(|w| k + w > q);
            if !(visible && in_window) {
                m[qi * s + k] = f32::NEG_INFINITY;
            }
        }
    }
    m
}

/// Attention through materialised scores, `rows` queries at a time (KV heads expanded).
pub fn blocked_attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    mask: Option<Tensor<2>>,
    scale: f32,
) -> Tensor<3> {
    let [heads, t, _] = q.dims();
    let s = k.dims()[1];
    let kt = k.swap_dims(1, 2);
    let rows = (SCORE_BLOCK_BYTES / (heads * s * 4).max(1)).clamp(1, t.max(1));
    let mut outs = Vec::new();
    let mut start = 0;
    while start < t {
        let end = (start + rows).min(t);
        let qb = q.clone().slice([0..heads, start..end, 0..q.dims()[2]]);
        let mut scores = qb.matmul(kt.clone()).mul_scalar(scale);
        if let Some(m) = &mask {
            scores = scores + m.clone().slice([start..end, 0..s]).unsqueeze::<3>();
        }
        outs.push(softmax(scores, 2).matmul(v.clone()));
        start = end;
    }
    if outs.len() == 1 {
        outs.pop().expect("one block")
    } else {
        Tensor::cat(outs, 1)
    }
}

/// Repeats each KV head `groups` times: `[kv, s, d] → [kv·groups, s, d]`, so query head `h`
/// reads KV head `h / groups` (transformers `repeat_kv`).
pub fn expand_kv(x: Tensor<3>, groups: usize) -> Tensor<3> {
    if groups == 1 {
        return x;
    }
    let [kv, s, d] = x.dims();
    x.unsqueeze_dim::<4>(1)
        .repeat_dim(1, groups)
        .reshape([kv * groups, s, d])
}

/// Where the keys of segments `1..` (rows `r` of a pass after `q0` cached positions) sit in
/// the pass's keys, stacked: each the cache's `0..q0`, then its own `q0 + r`. One gather of them
/// ([`segmented_attention`]) takes what a concatenation per segment and per keys and values took
/// (12 dispatches a layer for a study's four questions at MedGemma 4B, 2 now). The first
/// segment's keys already follow the cache's; `None` where no segment needs a gather.
pub fn segment_key_positions(q0: usize, segments: &[Range<usize>]) -> Option<Vec<i32>> {
    if q0 == 0 || segments.len() < 2 {
        return None;
    }
    let at = |p: usize| i32::try_from(p).expect("a key position fits an i32");
    Some(
        segments[1..]
            .iter()
            .flat_map(|r| (0..q0).chain(q0 + r.start..q0 + r.end).map(at))
            .collect(),
    )
}

/// Attention of query rows split into segments that continue one cache independently: the
/// rows of segment `r` attend to the `q0` cached keys and to their own keys `q0 + r` only, each
/// under its own mask. One segment is an ordinary continuation. Skipping the other segments'
/// keys means no score is computed for pairs the masks would discard anyway. `gather` holds
/// [`segment_key_positions`] of the segments, on the device (`None` when it is `None`).
///
/// # Shapes
/// - `q`: `[heads, t, d]`; `k`, `v`: `[heads / groups, q0 + t, d]` (cache then new rows)
/// - mask of segment `r`: `[r.len(), q0 + r.len()]`
/// - returns `[heads, t, d]`
#[allow(clippy::too_many_arguments)]
pub fn segmented_attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    q0: usize,
    segments: &[(Range<usize>, Mask)],
    gather: Option<&Tensor<1, Int>>,
    groups: usize,
    scale: f32,
) -> Tensor<3> {
    if let [(_, mask)] = segments {
        return attention(q, k, v, Some(mask.clone()), groups, scale);
    }
    let [hq, _, d] = q.dims();
    let hk = k.dims()[0];
    let gathered = gather.map(|at| {
        (
            k.clone().select(1, at.clone()),
            v.clone().select(1, at.clone()),
        )
    });
    let mut parts = Vec::with_capacity(segments.len());
    let mut at = 0;
    for (r, mask) in segments {
        let qs = q.clone().slice([0..hq, r.clone(), 0..d]);
        // Its own keys alone without a cache; the first segment's follow the cache's: views.
        let ([ks, vs], n) = match (q0, r.start) {
            (0, _) => ([&k, &v], r.clone()),
            (_, 0) => ([&k, &v], 0..q0 + r.end),
            _ => {
                let (gk, gv) = gathered
                    .as_ref()
                    .expect("segment_key_positions for a cache and several segments");
                at += q0 + r.len();
                ([gk, gv], at - q0 - r.len()..at)
            }
        };
        let keys = |x: &Tensor<3>| x.clone().slice([0..hk, n.clone(), 0..d]);
        parts.push(attention(
            qs,
            keys(ks),
            keys(vs),
            Some(mask.clone()),
            groups,
            scale,
        ));
    }
    Tensor::cat(parts, 1)
}

#[cfg(test)]
mod tests {
    use super::mask_values;

    fn allowed(m: &[f32], s: usize, q: usize, k: usize) -> bool {
        m[q * s + k] == 0.0
    }

    /// No row of a mask sees a key past its own position plus the spans' lookahead; the first
    /// query of a span sees exactly that far.
    #[test]
    #[allow(clippy::single_range_in_vec_init)] // spans: one image's token range
    fn no_query_sees_past_its_lookahead() {
        for (q0, t, spans, w) in [
            (0, 12, vec![2..6], None),
            (3, 9, vec![0..2, 5..11], Some(4)),
            (4, 6, vec![], None),
        ] {
            let s = q0 + t;
            let m = mask_values(q0, t, &spans, w);
            let n = super::lookahead(&spans);
            for i in 0..t {
                for k in q0 + i + n + 1..s {
                    assert!(!allowed(&m, s, i, k), "row {i} sees key {k} past {n}");
                }
            }
        }
        let m = mask_values(0, 12, &[2..6], None);
        assert_eq!(super::lookahead(&[2..6]), 3);
        assert!(allowed(&m, 12, 2, 5) && !allowed(&m, 12, 2, 6));
    }

    /// The keys of segments after the first: the cache's, then each one's own rows after it;
    /// nothing to gather without a cache or with one segment.
    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one segment
    fn segment_keys_are_the_cache_then_their_own() {
        let at = super::segment_key_positions(3, &[0..2, 2..5, 5..6]);
        assert_eq!(at, Some(vec![0, 1, 2, 5, 6, 7, 0, 1, 2, 8]));
        assert_eq!(super::segment_key_positions(0, &[0..2, 2..5]), None);
        assert_eq!(super::segment_key_positions(3, &[0..4]), None);
    }

    #[test]
    fn masks_are_causal_windowed_and_bidirectional_within_images() {
        let spans = vec![std::ops::Range { start: 2, end: 5 }];
        let g = mask_values(0, 7, &spans, None);
        assert!(allowed(&g, 7, 1, 0) && !allowed(&g, 7, 1, 2));
        // Image tokens 2..5 see each other both ways, text after sees all before it.
        assert!(allowed(&g, 7, 2, 4) && allowed(&g, 7, 4, 2));
        assert!(!allowed(&g, 7, 1, 3) && allowed(&g, 7, 6, 4));
        let w = mask_values(0, 7, &spans, Some(2));
        // Window 2: q sees k only if k > q - 2.
        assert!(allowed(&w, 7, 6, 5) && !allowed(&w, 7, 6, 4));
        // Within the image the window still applies backwards, not forwards.
        assert!(allowed(&w, 7, 2, 4) && !allowed(&w, 7, 4, 2));
        // A continuation with a cache: queries 5..7 over keys 0..7.
        let c = mask_values(5, 2, &spans, None);
        assert_eq!(c.len(), 14);
        assert!(allowed(&c, 7, 0, 5) && !allowed(&c, 7, 0, 6));
    }
}
