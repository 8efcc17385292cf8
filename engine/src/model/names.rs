//! Every GGUF tensor name the model reads, in one table: loading, [`super::Decoder::matrices`]
//! and [`super::Vision::matrices`] (the benchmark's kernel list) and the synthetic writer take
//! their names from here. Struct fields carry the same names, so a field path gives the tensor.
//!
//! ref: llama.cpp gguf-py/gguf/constants.py `TENSOR_NAMES` (MODEL_ARCH.GEMMA3, and the
//! `v.*`/`mm.*` names of the clip mmproj with the gemma3 projector).

/// Token embedding, also the tied output head.
pub const TOKEN_EMBD: &str = "token_embd";
/// A separate output head: Gemma 3 has none (its presence is an error).
pub const OUTPUT: &str = "output";
/// Final RMSNorm of the decoder.
pub const OUTPUT_NORM: &str = "output_norm";

/// Decoder layer tensors, under `blk.N.` ([`Block::text`]), in forward order.
pub mod blk {
    /// RMSNorm before attention (HF `input_layernorm`).
    pub const ATTN_NORM: &str = "attn_norm";
    /// Query projection.
    pub const ATTN_Q: &str = "attn_q";
    /// Key projection.
    pub const ATTN_K: &str = "attn_k";
    /// Value projection.
    pub const ATTN_V: &str = "attn_v";
    /// Not a GGUF tensor: `attn_q`'s rows, `attn_k`'s and `attn_v`'s, joined at load.
    pub const ATTN_QKV: &str = "attn_qkv";
    /// Not a GGUF tensor: `attn_q`'s rows then `attn_k`'s (`attn_v` has another type).
    pub const ATTN_QK: &str = "attn_qk";
    /// Per-head RMSNorm of the queries.
    pub const ATTN_Q_NORM: &str = "attn_q_norm";
    /// Per-head RMSNorm of the keys.
    pub const ATTN_K_NORM: &str = "attn_k_norm";
    /// Attention output projection (HF `o_proj`).
    pub const ATTN_OUTPUT: &str = "attn_output";
    /// RMSNorm of the attention output before the residual add.
    pub const POST_ATTENTION_NORM: &str = "post_attention_norm";
    /// RMSNorm before the MLP (HF `pre_feedforward_layernorm`).
    pub const FFN_NORM: &str = "ffn_norm";
    /// MLP gate projection (gelu-tanh).
    pub const FFN_GATE: &str = "ffn_gate";
    /// Not a GGUF tensor: `ffn_gate`'s rows then `ffn_up`'s, joined at load into one buffer.
    pub const FFN_GATE_UP: &str = "ffn_gate_up";
    /// MLP up projection.
    pub const FFN_UP: &str = "ffn_up";
    /// MLP down projection.
    pub const FFN_DOWN: &str = "ffn_down";
    /// RMSNorm of the MLP output before the residual add.
    pub const POST_FFW_NORM: &str = "post_ffw_norm";
}

/// Patch embedding (a 14×14 stride-14 convolution, read as a matrix) and its bias.
pub const V_PATCH_EMBD: &str = "v.patch_embd";
/// Learned position embeddings of the patches.
pub const V_POSITION_EMBD: &str = "v.position_embd";
/// LayerNorm after the last tower layer (HF `post_layernorm`).
pub const V_POST_LN: &str = "v.post_ln";

/// Vision tower layer tensors, under `v.blk.N.` ([`Block::vision`]), each with a bias.
pub mod v_blk {
    /// LayerNorm before attention.
    pub const LN1: &str = "ln1";
    /// Query projection.
    pub const ATTN_Q: &str = "attn_q";
    /// Key projection.
    pub const ATTN_K: &str = "attn_k";
    /// Value projection.
    pub const ATTN_V: &str = "attn_v";
    /// Attention output projection.
    pub const ATTN_OUT: &str = "attn_out";
    /// LayerNorm before the MLP.
    pub const LN2: &str = "ln2";
    /// MLP up projection (HF `fc1`).
    pub const FFN_UP: &str = "ffn_up";
    /// MLP down projection (HF `fc2`).
    pub const FFN_DOWN: &str = "ffn_down";
}

/// Projector RMSNorm of the pooled patches.
pub const MM_SOFT_EMB_NORM: &str = "mm.soft_emb_norm";
/// Projection to the decoder width (kept in HF's `[vision, text]` order by the converter).
pub const MM_INPUT_PROJECTION: &str = "mm.input_projection";

/// `name.weight`.
pub fn weight(name: &str) -> String {
    format!("{name}.weight")
}

/// `name.bias`.
pub fn bias(name: &str) -> String {
    format!("{name}.bias")
}

/// The prefix of one layer's tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block(String);

impl Block {
    /// Decoder layer `i`: `blk.i.`.
    pub fn text(i: usize) -> Block {
        Block(format!("blk.{i}."))
    }

    /// Vision tower layer `i`: `v.blk.i.`.
    pub fn vision(i: usize) -> Block {
        Block(format!("v.blk.{i}."))
    }

    /// The full name of tensor `name` of this layer, without `.weight`/`.bias`.
    pub fn name(&self, name: &str) -> String {
        format!("{}{name}", self.0)
    }

    /// `<prefix><name>.weight`.
    pub fn weight(&self, name: &str) -> String {
        weight(&self.name(name))
    }

    /// `<prefix><name>.bias`.
    pub fn bias(&self, name: &str) -> String {
        bias(&self.name(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_gguf_names_llama_cpp_writes() {
        assert_eq!(Block::text(3).weight(blk::ATTN_Q), "blk.3.attn_q.weight");
        assert_eq!(Block::vision(0).bias(v_blk::LN2), "v.blk.0.ln2.bias");
        assert_eq!(weight(MM_INPUT_PROJECTION), "mm.input_projection.weight");
        assert_eq!(Block::text(12).name(blk::FFN_DOWN), "blk.12.ffn_down");
    }
}
