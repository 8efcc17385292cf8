//! The self-test's last check: one forward of a tiny built-in decoder on the device against
//! the CPU, through the automatic choices the kernel checks left on.

use burn::tensor::{Device, Int, Tensor};

use crate::gguf::{GgmlType, Gguf, SliceSource};
use crate::model::config::TextConfig;
use crate::model::decoder::Decoder;
use crate::model::load::Loader;
use crate::model::synthetic;
use crate::quant::conformance::Measured;

/// Largest |Δlogit| of the tiny forward as a fraction of the largest |logit| on the CPU.
/// Measured at MedGemma's head width 256: |Δlogit| 4.9e-6 on lavapipe and 2.6e-6 on
/// SwiftShader with logits up to 3.4 (`engine/tests/selftest.rs`), i.e. 1.4e-6 of the largest;
/// the bound is 70× that, for GPUs whose fused multiply-adds and exp differ more from the
/// CPU's. A broken form (the injected fault) gives errors of the order of the logits
/// themselves, and NaN always fails.
pub const FORWARD_TOLERANCE: f64 = 1e-4;

/// The tiny built-in decoder: MedGemma's layer structure (grouped query heads, a sliding and a
/// global layer, the Q4_K_M type mix) at widths that keep it cheap (about 1 MB of weights),
/// with the model's own head width, so its attention takes the model's paths and compiled
/// kernels (MedGemma's 256: blocked for the prompt, the decode kernel for the step; at 64 it
/// compiled a fused kernel no MedGemma runs). The head count makes the attention output's rows
/// (`heads × head_dim`) whole K-quant blocks of 256.
fn tiny_config(head_dim: usize) -> TextConfig {
    let heads = (256 / gcd(head_dim, 256)).max(2);
    TextConfig {
        hidden: 256,
        layers: 2,
        heads,
        kv_heads: heads / 2,
        head_dim,
        ffn: 512,
        eps: 1e-6,
        rope_base: 1e6,
        rope_base_swa: 1e4,
        rope_scale: 8.0,
        sliding_window: 4,
        swa_pattern: 2,
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        final_softcap: None,
        vocab: 300,
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The tiny decoder's GGUF bytes: random well-formed weights from a fixed seed, scaled so that
/// activations stay of order 1 as in a trained model (norm weights near 1; matrix weights near
/// 1/√width); raw random blocks give matmul outputs in the tens of thousands.
fn tiny_gguf(c: &TextConfig) -> Result<Vec<u8>, String> {
    let shapes = synthetic::Shapes {
        hidden: c.hidden as u64,
        layers: c.layers as u64,
        heads: c.heads as u64,
        kv_heads: c.kv_heads as u64,
        head_dim: c.head_dim as u64,
        ffn: c.ffn as u64,
        vocab: c.vocab as u64,
        window: c.sliding_window as u64,
        v_hidden: 0,
        v_layers: 0,
        v_heads: 0,
        v_ffn: 0,
    };
    let meta = vec![(
        "general.architecture".to_string(),
        crate::gguf::Value::String("gemma3".into()),
    )];
    let mut tensors = synthetic::text_tensors(&shapes);
    // An F16 head: the logits then go through the f16 widening too.
    if let Some(t) = tensors
        .iter_mut()
        .find(|t| t.name == crate::model::names::weight(crate::model::names::TOKEN_EMBD))
    {
        t.ty = GgmlType::F16;
    }
    let mut out = Vec::new();
    crate::gguf::write::write_streaming(&meta, &tensors, &mut out, |i, buf| {
        let t = &tensors[i];
        let n: u64 = t.dims.iter().product();
        let mut rng = crate::rng::SplitMix64::new(0x5e1f ^ i as u64);
        buf.clear();
        if t.dims.len() == 1 {
            // Gemma's norms hold 1 + w.
            for _ in 0..n {
                buf.extend_from_slice(&(1.0 + 0.05 * (rng.unit_f32() - 0.5)).to_le_bytes());
            }
            return Ok(());
        }
        buf.extend_from_slice(&crate::quant::random_blocks(
            t.ty,
            n as usize,
            0x5e1f ^ i as u64,
        ));
        // Float weights are drawn in ±1, quantised ones up to a few hundred: both brought to
        // about 1/√width.
        let s = match t.ty {
            GgmlType::F16 => 1.0 / (t.dims[0] as f32).sqrt(),
            _ => 1.0 / 256.0,
        };
        scale_halves(t.ty, buf, s);
        Ok(())
    })
    .map_err(|e| format!("building the tiny model: {e}"))?;
    Ok(out)
}

/// Multiplies the f16 numbers of blocks of `ty` (F16 weights, block scales) by `s`.
fn scale_halves(ty: GgmlType, buf: &mut [u8], s: f32) {
    let scale = |b: &mut [u8]| {
        let v = half::f16::from_le_bytes([b[0], b[1]]).to_f32() * s;
        b.copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
    };
    if ty == GgmlType::F16 {
        buf.chunks_exact_mut(2).for_each(scale);
        return;
    }
    for block in buf.chunks_exact_mut(ty.type_size() as usize) {
        for &at in crate::quant::f16_fields(ty) {
            scale(&mut block[at..at + 2]);
        }
    }
}

async fn load_tiny(bytes: &[u8], cfg: &TextConfig, device: &Device) -> Result<Decoder, String> {
    let src = SliceSource(bytes);
    let g = Gguf::read_async(&src).await.map_err(|e| e.to_string())?;
    let mut progress = |_: &crate::model::load::Progress| {};
    let mut l = Loader::new(&g, &src, device, usize::MAX / 2, &mut progress);
    Decoder::load(&mut l, cfg.clone())
        .await
        .map_err(|e| e.to_string())
}

/// Prompt of the tiny forward: more tokens than the window (the sliding layer masks) and than
/// [`crate::quant::GEMV_MAX_M`] (the prefill takes the prefill kernel); one decoding step follows.
const TINY_IDS: [u32; 10] = [2, 17, 5, 299, 64, 128, 9, 77, 3, 250];

/// The tiny decoder on its device: the logits of every prompt position then of one decoded
/// token (so both the prefill and the decoding kernels run), the last prompt position's
/// logits, and the device's greedy id after the prompt.
async fn tiny_logits(d: &Decoder) -> Result<(Vec<f32>, Vec<f32>, u32), String> {
    let read = |t: Tensor<2>| async {
        crate::model::nn::read_f32(t)
            .await
            .map_err(|e| e.to_string())
    };
    let mut cache = d.new_cache();
    let h = d
        .forward(&TINY_IDS, &[], &mut cache)
        .map_err(|e| e.to_string())?;
    let t = TINY_IDS.len();
    let hidden = h.dims()[1];
    let mut all = read(d.logits(h.clone())).await?;
    let last = read(d.logits(h.clone().slice([t - 1..t, 0..hidden]))).await?;
    let id = read_id(d.greedy(h)).await?;
    let step = d
        .forward(&[TINY_IDS[1]], &[], &mut cache)
        .map_err(|e| e.to_string())?;
    all.extend(read(d.logits(step)).await?);
    Ok((all, last, id))
}

async fn read_id(t: Tensor<1, Int>) -> Result<u32, String> {
    t.into_data_async()
        .await
        .map_err(|e| format!("readback failed: {e:?}"))?
        .try_into_vec::<u32>()
        .map_err(|e| format!("{e:?}"))?
        .first()
        .copied()
        .ok_or_else(|| "no id read back".to_string())
}

/// The tiny forward's logits on `device` against the CPU's, and the device argmax against the
/// host's argmax of the same logits (bound 0: the logit it picks may fall short of the largest
/// by nothing). `head_dim`: the model's decoder head width.
pub(super) async fn tiny_forward(
    device: &Device,
    head_dim: usize,
) -> Result<(Measured, Measured), String> {
    let cfg = tiny_config(head_dim);
    let bytes = tiny_gguf(&cfg)?;
    let on_device = load_tiny(&bytes, &cfg, device).await?;
    let on_cpu = load_tiny(&bytes, &cfg, &crate::device::cpu()).await?;
    let (got, last, id) = tiny_logits(&on_device).await?;
    let (want, _, _) = tiny_logits(&on_cpu).await?;
    let scale = want.iter().fold(0f64, |a, &b| a.max(f64::from(b).abs()));
    let mut worst = (0f64, 0usize);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let e = f64::from(g - w).abs();
        let e = if e.is_nan() { f64::INFINITY } else { e };
        if e > worst.0 {
            worst = (e, i);
        }
    }
    let (t, v) = (worst.1 / cfg.vocab, worst.1 % cfg.vocab);
    let forward = Measured {
        max_error: if got.len() == want.len() {
            worst.0
        } else {
            f64::INFINITY
        },
        bound: FORWARD_TOLERANCE * scale,
        detail: format!(
            "logit [{t}, {v}]: CPU {} device {}",
            want.get(worst.1).copied().unwrap_or(f32::NAN),
            got.get(worst.1).copied().unwrap_or(f32::NAN)
        ),
    };
    let best = crate::model::nn::argmax(&last);
    let picked = last.get(id as usize).copied().unwrap_or(f32::NEG_INFINITY);
    let short = f64::from(last[best] - picked);
    let argmax = Measured {
        max_error: if short.is_nan() { f64::INFINITY } else { short },
        bound: 0.0,
        detail: format!("device picked id {id}, the host's argmax is {best}"),
    };
    Ok((forward, argmax))
}
