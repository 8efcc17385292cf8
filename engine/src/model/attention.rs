//! Scaled dot-product attention: the dispatch between the fused GPU kernels ([`super::fused`],
//! [`super::decode_attention`]) and blocked GEMMs (the CPU), GQA head expansion, and the decoder's segmented form in which
//! several independent continuations of one cache share a pass.

use std::ops::Range;

use burn::tensor::Tensor;
use burn::tensor::activation::softmax;

use burn::backend::Dispatch;
use burn::backend::tensor::FloatTensor;

use super::{decode_attention, fused};
use crate::quant::forms::{self, Form};

/// Rows of queries processed at once in attention, so the score matrix of one block stays
/// well under a storage-buffer binding (128 MiB on many WebGPU adapters).
const SCORE_BLOCK_BYTES: usize = 32 << 20;

/// Scaled dot-product attention with an optional additive mask: on GPU devices the fused
/// kernel (heads up to 128 wide), else the decode kernel (a few rows, heads up to 256 wide);
/// blocked GEMMs on the CPU and for the rest.
///
/// # Shapes
/// - `q`: `[heads, t, d]`, `k`, `v`: `[heads / groups, s, d]`
/// - `mask`: `[t, s]` with 0 or −∞
/// - returns `[heads, t, d]`
pub fn attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    mask: Option<Tensor<2>>,
    groups: usize,
    scale: f32,
) -> Tensor<3> {
    let [_, t, d] = q.dims();
    for kernel in [Kernel::Fused, Kernel::Decode] {
        if kernel.supports(&q.device(), t, d) {
            return kernel.run(q, k, v, mask, groups, scale);
        }
    }
    blocked_attention(q, expand_kv(k, groups), expand_kv(v, groups), mask, scale)
}

/// The fused GPU attention kernels, each a backend extension of the same signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// One workgroup per query row ([`fused`]): heads up to [`fused::MAX_HEAD_DIM`] wide.
    Fused,
    /// A few query rows over a long cache ([`decode_attention`]): heads up to
    /// [`decode_attention::MAX_HEAD_DIM`] wide, at most [`decode_attention::MAX_ROWS`] rows.
    Decode,
}

/// A kernel as its backend extension declares it: `q`, `k`, `v`, the mask (any f32 buffer when
/// there is none), whether there is one, groups, scale.
type KernelOp = fn(
    FloatTensor<Dispatch>,
    FloatTensor<Dispatch>,
    FloatTensor<Dispatch>,
    FloatTensor<Dispatch>,
    bool,
    usize,
    f32,
) -> FloatTensor<Dispatch>;

impl Kernel {
    /// Whether attention of `t` query rows with head size `d` on `device` takes this kernel:
    /// a GPU device, the kernel's limits, and the device self-test left its form on.
    pub fn supports(self, device: &burn::tensor::Device, t: usize, d: usize) -> bool {
        let fits = match self {
            Kernel::Fused => d <= fused::MAX_HEAD_DIM,
            Kernel::Decode => {
                t <= decode_attention::MAX_ROWS && d <= decode_attention::MAX_HEAD_DIM
            }
        };
        fits && crate::device::queues_work(device) && forms::enabled(self.form())
    }

    /// The form the self-test checks and may turn off.
    fn form(self) -> Form {
        match self {
            Kernel::Fused => Form::FusedAttention,
            Kernel::Decode => Form::DecodeAttention,
        }
    }

    /// Runs the kernel; shapes as [`attention`]'s. GPU devices only ([`Kernel::supports`]).
    pub fn run(
        self,
        q: Tensor<3>,
        k: Tensor<3>,
        v: Tensor<3>,
        mask: Option<Tensor<2>>,
        groups: usize,
        scale: f32,
    ) -> Tensor<3> {
        let op: KernelOp = match self {
            Kernel::Fused => <Dispatch as fused::AttentionOps>::fused_attention,
            Kernel::Decode => <Dispatch as decode_attention::DecodeAttentionOps>::decode_attention,
        };
        let has_mask = mask.is_some();
        // Without a mask the kernel never reads it; any f32 buffer satisfies the binding.
        let mask = mask.map_or_else(|| q.clone().into_dispatch(), |m| m.into_dispatch());
        let out = Tensor::<3>::from_dispatch(op(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            mask,
            has_mask,
            groups,
            scale,
        ));
        forms::perturb(self.form(), out)
    }
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

/// Attention of query rows split into segments that continue one cache independently: the
/// rows of segment `r` attend to the `q0` cached keys and to their own keys `q0 + r` only, each
/// under its own mask. One segment is an ordinary continuation. Skipping the other segments'
/// keys means no score is computed for pairs the masks would discard anyway.
///
/// # Shapes
/// - `q`: `[heads, t, d]`; `k`, `v`: `[heads / groups, q0 + t, d]` (cache then new rows)
/// - mask of segment `r`: `[r.len(), q0 + r.len()]`
/// - returns `[heads, t, d]`
pub fn segmented_attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    q0: usize,
    segments: &[(Range<usize>, Tensor<2>)],
    groups: usize,
    scale: f32,
) -> Tensor<3> {
    if let [(_, mask)] = segments {
        return attention(q, k, v, Some(mask.clone()), groups, scale);
    }
    let [hq, _, d] = q.dims();
    let hk = k.dims()[0];
    let own = |x: &Tensor<3>, r: &Range<usize>| {
        let mine = x.clone().slice([0..hk, q0 + r.start..q0 + r.end, 0..d]);
        match q0 {
            0 => mine,
            _ => Tensor::cat(vec![x.clone().slice([0..hk, 0..q0, 0..d]), mine], 1),
        }
    };
    let parts = segments
        .iter()
        .map(|(r, mask)| {
            let qs = q.clone().slice([0..hq, r.clone(), 0..d]);
            attention(
                qs,
                own(&k, r),
                own(&v, r),
                Some(mask.clone()),
                groups,
                scale,
            )
        })
        .collect();
    Tensor::cat(parts, 1)
}
