//! Named intermediate tensors, in llama.cpp's spirit (its graph callback names every stage
//! `name-layer`): a forward given a [`Tracer`] hands it each stage as it is computed, so one
//! stage can be read back and diffed against transformers (`output_hidden_states`, forward
//! hooks) or llama.cpp (`llama-eval-callback`).
//!
//! Mapping to transformers' `output_hidden_states` (tuple index → tap):
//! - decoder: `hidden_states[0]` = [`INP_SCALED`]; `hidden_states[i]` (1 ≤ i < layers) =
//!   [`L_OUT`] of layer `i − 1`; the last entry is the final norm's output, [`RESULT_NORM`],
//!   not the last layer's [`L_OUT`];
//! - vision tower: `hidden_states[0]` = [`V_INP_EMBD`]; `hidden_states[i]` = [`V_L_OUT`] of
//!   layer `i − 1` (all layers, the last one included); `last_hidden_state` = [`V_POST_LN`];
//! - projector: [`MM_OUT`] = `get_image_features`.

use burn::tensor::Tensor;

/// Scaled token embeddings with the image features injected (llama.cpp `inp_scaled`).
pub const INP_SCALED: &str = "inp_scaled";
/// A decoder layer's input after its first RMSNorm.
pub const ATTN_NORM: &str = "attn_norm";
/// Attention after the output projection, before `post_attention_norm`.
pub const ATTN_OUT: &str = "attn_out";
/// The MLP's output (after `ffn_down`), before `post_ffw_norm`.
pub const FFN_OUT: &str = "ffn_out";
/// The residual stream after the layer.
pub const L_OUT: &str = "l_out";
/// The decoder's final RMSNorm (what the head multiplies).
pub const RESULT_NORM: &str = "result_norm";
/// Patch embeddings plus position embeddings.
pub const V_INP_EMBD: &str = "v.inp_embd";
/// The residual stream after a tower layer.
pub const V_L_OUT: &str = "v.l_out";
/// The tower's output after its final LayerNorm.
pub const V_POST_LN: &str = "v.post_ln";
/// The projected image features (`[tokens_per_image, text hidden]`).
pub const MM_OUT: &str = "mm.out";

/// Where a tensor was taken: a stage name above and its layer (`None` outside the layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tap {
    /// Stage name.
    pub name: &'static str,
    /// Layer index, for per-layer stages.
    pub layer: Option<usize>,
}

impl Tap {
    /// A stage outside the layers.
    pub fn at(name: &'static str) -> Tap {
        Tap { name, layer: None }
    }

    /// A stage of layer `layer`.
    pub fn layer(name: &'static str, layer: usize) -> Tap {
        Tap {
            name,
            layer: Some(layer),
        }
    }
}

impl std::fmt::Display for Tap {
    /// llama.cpp's form: `attn_norm-3`, or the bare name outside the layers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.layer {
            Some(i) => write!(f, "{}-{i}", self.name),
            None => f.write_str(self.name),
        }
    }
}

/// Receives every tapped tensor (`[rows, width]`) of a traced forward. The tensor is on the
/// model's device; a receiver that keeps it clones the handle, which copies no data.
pub trait Tracer {
    /// Called once per stage, in forward order.
    fn tap(&mut self, at: Tap, x: &Tensor<2>);
}

impl<F: FnMut(Tap, &Tensor<2>)> Tracer for F {
    fn tap(&mut self, at: Tap, x: &Tensor<2>) {
        self(at, x)
    }
}

/// Ignores every tap: what the untraced forwards pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTrace;

impl Tracer for NoTrace {
    fn tap(&mut self, _: Tap, _: &Tensor<2>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taps_print_as_llama_cpp_names_them() {
        assert_eq!(Tap::layer(ATTN_NORM, 3).to_string(), "attn_norm-3");
        assert_eq!(Tap::at(RESULT_NORM).to_string(), "result_norm");
    }
}
