//! Synthetic MedGemma-shaped GGUF pairs: random (well-formed) weights in the real shapes and
//! the real type mix, with the real Gemma 3 tokenizer, for memory and speed measurements at
//! MedGemma 4B scale without the gated weights. The numbers they produce mean nothing.

use std::io::Write;

use super::names::{self, Block, blk, v_blk};
use crate::gguf::write::{TensorSpec, write_streaming};
use crate::gguf::{Array, GgmlType, Gguf, Value};
use crate::quant::random_blocks;

/// Shapes of a synthetic pair.
#[derive(Debug, Clone)]
pub struct Shapes {
    /// Decoder width.
    pub hidden: u64,
    /// Decoder layers.
    pub layers: u64,
    /// Query heads.
    pub heads: u64,
    /// KV heads.
    pub kv_heads: u64,
    /// Head width.
    pub head_dim: u64,
    /// MLP width.
    pub ffn: u64,
    /// Vocabulary rows.
    pub vocab: u64,
    /// Sliding window.
    pub window: u64,
    /// Vision width.
    pub v_hidden: u64,
    /// Vision layers.
    pub v_layers: u64,
    /// Vision heads.
    pub v_heads: u64,
    /// Vision MLP width.
    pub v_ffn: u64,
}

impl Shapes {
    /// MedGemma 4B (`google/medgemma-4b-it`).
    pub fn medgemma_4b() -> Shapes {
        Shapes {
            hidden: 2560,
            layers: 34,
            heads: 8,
            kv_heads: 4,
            head_dim: 256,
            ffn: 10240,
            vocab: 262_144,
            window: 1024,
            v_hidden: 1152,
            v_layers: 27,
            v_heads: 16,
            v_ffn: 4304,
        }
    }
}

/// ref: llama.cpp src/llama-quant.cpp `use_more_bits`: Q4_K_M gives these layers Q6_K for
/// `attn_v` and `ffn_down` (17 of MedGemma's 34).
pub fn use_more_bits(i: u64, n: u64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

fn spec(name: String, dims: Vec<u64>, ty: GgmlType) -> TensorSpec {
    TensorSpec { name, dims, ty }
}

/// The text GGUF's tensors with the Q4_K_M mix.
pub fn text_tensors(s: &Shapes) -> Vec<TensorSpec> {
    let (h, q, kv) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let mut v = vec![spec(
        names::weight(names::TOKEN_EMBD),
        vec![h, s.vocab],
        GgmlType::Q6_K,
    )];
    for i in 0..s.layers {
        let b = Block::text(i as usize);
        let more = if use_more_bits(i, s.layers) {
            GgmlType::Q6_K
        } else {
            GgmlType::Q4_K
        };
        v.extend(
            [
                (blk::ATTN_NORM, vec![h], GgmlType::F32),
                (blk::ATTN_Q, vec![h, q], GgmlType::Q4_K),
                (blk::ATTN_K, vec![h, kv], GgmlType::Q4_K),
                (blk::ATTN_V, vec![h, kv], more),
                (blk::ATTN_Q_NORM, vec![s.head_dim], GgmlType::F32),
                (blk::ATTN_K_NORM, vec![s.head_dim], GgmlType::F32),
                (blk::ATTN_OUTPUT, vec![q, h], GgmlType::Q4_K),
                (blk::POST_ATTENTION_NORM, vec![h], GgmlType::F32),
                (blk::FFN_NORM, vec![h], GgmlType::F32),
                (blk::FFN_GATE, vec![h, s.ffn], GgmlType::Q4_K),
                (blk::FFN_UP, vec![h, s.ffn], GgmlType::Q4_K),
                (blk::FFN_DOWN, vec![s.ffn, h], more),
                (blk::POST_FFW_NORM, vec![h], GgmlType::F32),
            ]
            .map(|(name, dims, ty)| spec(b.weight(name), dims, ty)),
        );
    }
    v.push(spec(
        names::weight(names::OUTPUT_NORM),
        vec![h],
        GgmlType::F32,
    ));
    v
}

/// The mmproj GGUF's tensors (F16 weights, F32 embeddings, norms and biases).
pub fn mmproj_tensors(s: &Shapes) -> Vec<TensorSpec> {
    let (h, f) = (s.v_hidden, s.v_ffn);
    let mut v = vec![
        spec(
            names::weight(names::V_PATCH_EMBD),
            vec![14, 14, 3, h],
            GgmlType::F32,
        ),
        spec(names::bias(names::V_PATCH_EMBD), vec![h], GgmlType::F32),
        spec(
            names::weight(names::V_POSITION_EMBD),
            vec![h, 4096],
            GgmlType::F32,
        ),
    ];
    for i in 0..s.v_layers {
        let b = Block::vision(i as usize);
        for (name, rows, cols) in [
            (v_blk::ATTN_Q, h, h),
            (v_blk::ATTN_K, h, h),
            (v_blk::ATTN_V, h, h),
            (v_blk::ATTN_OUT, h, h),
            (v_blk::FFN_UP, f, h),
            (v_blk::FFN_DOWN, h, f),
        ] {
            v.push(spec(b.weight(name), vec![cols, rows], GgmlType::F16));
            v.push(spec(b.bias(name), vec![rows], GgmlType::F32));
        }
        for ln in [v_blk::LN1, v_blk::LN2] {
            v.push(spec(b.weight(ln), vec![h], GgmlType::F32));
            v.push(spec(b.bias(ln), vec![h], GgmlType::F32));
        }
    }
    v.extend([
        spec(names::weight(names::V_POST_LN), vec![h], GgmlType::F32),
        spec(names::bias(names::V_POST_LN), vec![h], GgmlType::F32),
        spec(
            names::weight(names::MM_SOFT_EMB_NORM),
            vec![h],
            GgmlType::F32,
        ),
        spec(
            names::weight(names::MM_INPUT_PROJECTION),
            vec![s.hidden, h],
            GgmlType::F16,
        ),
    ]);
    v
}

fn kv(k: &str, v: Value) -> (String, Value) {
    (k.to_string(), v)
}

/// Text metadata: the decoder hyper-parameters and the tokenizer copied from `tokenizer`.
pub fn text_metadata(s: &Shapes, tokenizer: &Gguf) -> Vec<(String, Value)> {
    let mut m = vec![
        kv("general.architecture", Value::String("gemma3".into())),
        kv(
            "general.name",
            Value::String("synthetic MedGemma-shaped model (random weights)".into()),
        ),
        kv("gemma3.context_length", Value::U32(131_072)),
        kv("gemma3.embedding_length", Value::U32(s.hidden as u32)),
        kv("gemma3.block_count", Value::U32(s.layers as u32)),
        kv("gemma3.feed_forward_length", Value::U32(s.ffn as u32)),
        kv("gemma3.attention.head_count", Value::U32(s.heads as u32)),
        kv(
            "gemma3.attention.head_count_kv",
            Value::U32(s.kv_heads as u32),
        ),
        kv("gemma3.attention.key_length", Value::U32(s.head_dim as u32)),
        kv(
            "gemma3.attention.value_length",
            Value::U32(s.head_dim as u32),
        ),
        kv("gemma3.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        kv(
            "gemma3.attention.sliding_window",
            Value::U32(s.window as u32),
        ),
        kv("gemma3.rope.freq_base", Value::F32(1e6)),
        kv("gemma3.rope.freq_base_swa", Value::F32(1e4)),
        kv("gemma3.rope.scaling.type", Value::String("linear".into())),
        kv("gemma3.rope.scaling.factor", Value::F32(8.0)),
        kv("general.file_type", Value::U32(15)),
    ];
    m.extend(
        tokenizer
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .cloned(),
    );
    m
}

/// mmproj metadata (clip with the gemma3 projector).
pub fn mmproj_metadata(s: &Shapes) -> Vec<(String, Value)> {
    vec![
        kv("general.architecture", Value::String("clip".into())),
        kv("general.type", Value::String("mmproj".into())),
        kv("clip.projector_type", Value::String("gemma3".into())),
        kv("clip.has_vision_encoder", Value::Bool(true)),
        kv("clip.vision.image_size", Value::U32(896)),
        kv("clip.vision.patch_size", Value::U32(14)),
        kv(
            "clip.vision.embedding_length",
            Value::U32(s.v_hidden as u32),
        ),
        kv(
            "clip.vision.feed_forward_length",
            Value::U32(s.v_ffn as u32),
        ),
        kv("clip.vision.block_count", Value::U32(s.v_layers as u32)),
        kv(
            "clip.vision.attention.head_count",
            Value::U32(s.v_heads as u32),
        ),
        kv("clip.vision.attention.layer_norm_epsilon", Value::F32(1e-6)),
        kv("clip.vision.projection_dim", Value::U32(s.hidden as u32)),
        kv(
            "clip.vision.image_mean",
            Value::Array(Array::F32(vec![0.5; 3])),
        ),
        kv(
            "clip.vision.image_std",
            Value::Array(Array::F32(vec![0.5; 3])),
        ),
        kv("clip.use_gelu", Value::Bool(true)),
    ]
}

/// File name of a synthetic pair's text GGUF ([`write_pair`]).
pub const TEXT_FILE: &str = "medgemma-4b-synthetic-Q4_K_M.gguf";
/// File name of a synthetic pair's mmproj GGUF ([`write_pair`]).
pub const MMPROJ_FILE: &str = "mmproj-medgemma-4b-synthetic-F16.gguf";

/// Writes the text and mmproj GGUFs of shapes `s` into `dir` ([`TEXT_FILE`], [`MMPROJ_FILE`]),
/// with `tokenizer`'s vocabulary; `on_tensor` sees each file's name and its tensors written so
/// far. Returns the two paths.
pub fn write_pair(
    dir: &std::path::Path,
    s: &Shapes,
    tokenizer: &Gguf,
    seed: u64,
    on_tensor: &mut dyn FnMut(&str, usize, usize),
) -> Result<[std::path::PathBuf; 2], (std::path::PathBuf, std::io::Error)> {
    let mut paths = Vec::with_capacity(2);
    for (name, meta, tensors) in [
        (TEXT_FILE, text_metadata(s, tokenizer), text_tensors(s)),
        (MMPROJ_FILE, mmproj_metadata(s), mmproj_tensors(s)),
    ] {
        let path = dir.join(name);
        let written = std::fs::File::create(&path).and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            write(&mut w, &meta, &tensors, seed, &mut |i, n| {
                on_tensor(name, i, n)
            })?;
            w.flush()
        });
        match written {
            Ok(()) => paths.push(path),
            Err(e) => return Err((path, e)),
        }
    }
    Ok([paths.remove(0), paths.remove(0)])
}

/// Writes a GGUF of random well-formed tensors; norms get weights near 1 (GGUF norms hold
/// `1 + w`) and biases near 0, so activations stay finite at full depth.
pub fn write(
    out: &mut impl Write,
    metadata: &[(String, Value)],
    tensors: &[TensorSpec],
    seed: u64,
    on_tensor: &mut dyn FnMut(usize, usize),
) -> std::io::Result<()> {
    write_streaming(metadata, tensors, out, |i, buf| {
        let t = &tensors[i];
        let n: u64 = t.dims.iter().product();
        buf.clear();
        if t.ty == GgmlType::F32 && t.dims.len() == 1 {
            let base = if t.name.ends_with("norm.weight")
                || t.name.contains(".ln") && t.name.ends_with("weight")
            {
                1.0
            } else {
                0.0
            };
            let mut rng = crate::rng::SplitMix64::new(seed ^ i as u64);
            for _ in 0..n {
                buf.extend_from_slice(&(base + 0.05 * (rng.unit_f32() - 0.5)).to_le_bytes());
            }
        } else {
            buf.extend_from_slice(&random_blocks(t.ty, n as usize, seed ^ (i as u64) << 20));
            if t.ty == GgmlType::F32 || t.ty == GgmlType::F16 {
                // Keep weights small: random_blocks draws floats in ±1, too large at width 10240.
                let scale = 1.0 / (t.dims[0] as f32).sqrt();
                rescale(t.ty, buf, scale);
            }
        }
        on_tensor(i, tensors.len());
        Ok(())
    })
}

fn rescale(ty: GgmlType, buf: &mut [u8], s: f32) {
    match ty {
        GgmlType::F32 => buf.chunks_exact_mut(4).for_each(|c| {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * s;
            c.copy_from_slice(&v.to_le_bytes());
        }),
        GgmlType::F16 => buf.chunks_exact_mut(2).for_each(|c| {
            let v = half::f16::from_le_bytes([c[0], c[1]]).to_f32() * s;
            c.copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_k_m_mix_gives_17_of_34_layers_more_bits() {
        assert_eq!((0..34).filter(|&i| use_more_bits(i, 34)).count(), 17);
        let s = Shapes::medgemma_4b();
        let t = text_tensors(&s);
        let bytes: u64 = t
            .iter()
            .map(|t| t.ty.bytes_for(t.dims.iter().product()).unwrap())
            .sum();
        // A stock MedGemma 4B Q4_K_M text GGUF is ~2.5 GB.
        assert!((2.3e9..2.6e9).contains(&(bytes as f64)), "{bytes}");
        let m = mmproj_tensors(&s);
        let mbytes: u64 = m
            .iter()
            .map(|t| t.ty.bytes_for(t.dims.iter().product()).unwrap())
            .sum();
        assert!((0.8e9..0.9e9).contains(&(mbytes as f64)), "{mbytes}");
    }

    #[test]
    fn small_synthetic_pair_round_trips_through_the_parser() {
        let s = Shapes {
            hidden: 256,
            layers: 2,
            heads: 2,
            kv_heads: 1,
            head_dim: 64,
            ffn: 512,
            vocab: 512,
            window: 16,
            v_hidden: 64,
            v_layers: 1,
            v_heads: 2,
            v_ffn: 128,
        };
        let meta = mmproj_metadata(&s);
        let tensors = mmproj_tensors(&s);
        let mut out = Vec::new();
        write(&mut out, &meta, &tensors, 1, &mut |_, _| {}).unwrap();
        let g = Gguf::parse_prefix(&out, out.len() as u64).unwrap();
        assert_eq!(g.tensors.len(), tensors.len());
        crate::model::VisionConfig::from_gguf(&g).unwrap();
    }
}
