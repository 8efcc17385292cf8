//! The one host wrapper of the fused GPU attention kernels ([`super::fused_attention`],
//! [`super::decode_attention`], [`super::wide_attention`]): which one a shape and device take, and the launch with its
//! mask binding and test fault. [`crate::model::attention::attention`] picks among them and the
//! CPU's blocked GEMMs.

use burn::backend::Dispatch;
use burn::backend::tensor::FloatTensor;
use burn::tensor::Tensor;

use super::{decode_attention, fused_attention as fused, wide_attention as wide};
use crate::kernels::forms::{self, Form};

/// An additive attention mask (`[t, s]`, 0 or −∞) and what the caller promises about it.
#[derive(Debug, Clone)]
pub struct Mask {
    /// The values: 0 where a query row attends to a key, −∞ where not.
    pub values: Tensor<2>,
    /// `Some(n)`: queries sit at the last `t` of the `s` key positions and row `i` sees no key
    /// past position `s − t + i + n` (causal, with bidirectional spans of up to `n + 1` tokens), so
    /// a kernel may skip the keys past it; `None`: no promise.
    pub lookahead: Option<usize>,
}

/// The fused GPU attention kernels, each a backend extension of the same signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// One workgroup per query row ([`fused`]): heads up to [`fused::MAX_HEAD_DIM`] wide.
    Fused,
    /// A few query rows over a long cache ([`decode_attention`]): heads up to
    /// [`decode_attention::MAX_HEAD_DIM`] wide, at most [`decode_attention::MAX_ROWS`] rows.
    Decode,
    /// Many query rows with heads over [`fused::MAX_HEAD_DIM`] wide ([`wide`]): heads up to
    /// [`wide::MAX_HEAD_DIM`], each lane's share of them whole 4-float runs.
    Wide,
}

/// The fused and decode kernels as their backend extensions declare them: `q`, `k`, `v`, the mask (any f32 buffer when
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
            Kernel::Wide => wide::fits(d),
        };
        fits && super::runs(device, self.form())
    }

    /// The form the self-test checks and may turn off.
    fn form(self) -> Form {
        match self {
            Kernel::Fused => Form::FusedAttention,
            Kernel::Decode => Form::DecodeAttention,
            Kernel::Wide => Form::WideAttention,
        }
    }

    /// Runs the kernel; shapes as [`crate::model::attention::attention`]'s. GPU devices only
    /// ([`Kernel::supports`]). Only the wide-head kernel uses the mask's lookahead.
    pub fn run(
        self,
        q: Tensor<3>,
        k: Tensor<3>,
        v: Tensor<3>,
        mask: Option<Mask>,
        groups: usize,
        scale: f32,
    ) -> Tensor<3> {
        self.run_chunked(q, k, v, mask, groups, scale, None)
    }

    /// [`Kernel::run`] with the wide-head kernel's keys split into `chunks` (`None`: as
    /// [`wide::chunks_for`] chooses; the other kernels ignore it), so that tests reach each
    /// form.
    #[allow(clippy::too_many_arguments)]
    pub fn run_chunked(
        self,
        q: Tensor<3>,
        k: Tensor<3>,
        v: Tensor<3>,
        mask: Option<Mask>,
        groups: usize,
        scale: f32,
        chunks: Option<usize>,
    ) -> Tensor<3> {
        let lookahead = mask.as_ref().and_then(|m| m.lookahead);
        let has_mask = mask.is_some();
        // Without a mask the kernel never reads it; any f32 buffer satisfies the binding.
        let mask = mask.map_or_else(|| q.clone().into_dispatch(), |m| m.values.into_dispatch());
        let (q, k, v) = (q.into_dispatch(), k.into_dispatch(), v.into_dispatch());
        let out = match self {
            Kernel::Wide => <Dispatch as wide::WideAttentionOps>::wide_attention(
                q, k, v, mask, has_mask, lookahead, groups, scale, chunks,
            ),
            _ => {
                let op: KernelOp = match self {
                    Kernel::Decode => {
                        <Dispatch as decode_attention::DecodeAttentionOps>::decode_attention
                    }
                    _ => <Dispatch as fused::AttentionOps>::fused_attention,
                };
                op(q, k, v, mask, has_mask, groups, scale)
            }
        };
        forms::perturb(self.form(), Tensor::<3>::from_dispatch(out))
    }
}
