//! A model pair — a `gemma3` text GGUF and its optional `clip` mmproj — as headers read once
//! per load. The text header holds the tokenizer's 262k-token vocabulary, so parsing it is not
//! free: the pair check, the CPU footprint check, [`crate::session::Model::load_with_headers`]
//! and the model card all read the same [`PairHeaders`].

use std::collections::BTreeMap;

use crate::gguf::{Gguf, RangeSource};
use crate::model::{ModelError, TextConfig, VisionConfig};

/// The text file's architecture.
pub const TEXT_ARCH: &str = "gemma3";
/// The mmproj file's architecture.
pub const MMPROJ_ARCH: &str = "clip";

/// Which file of the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The text GGUF.
    Text,
    /// The vision (mmproj) GGUF.
    Mmproj,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::Text => "text model",
            Part::Mmproj => "mmproj",
        })
    }
}

/// Why two files cannot be loaded as a pair.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// One file is unreadable or not the kind it should be.
    #[error("{part}: {source}")]
    File {
        /// Which file.
        part: Part,
        /// What is wrong with it.
        source: ModelError,
    },
    /// Each file is fine, but the mmproj was made for another text model.
    #[error(
        "the mmproj projects to width {mmproj} but the text model is {text} wide: they are not a pair"
    )]
    Mismatch {
        /// Projector output width.
        mmproj: usize,
        /// Decoder width.
        text: usize,
    },
}

fn in_part(part: Part) -> impl Fn(ModelError) -> PairError {
    move |source| PairError::File { part, source }
}

/// The configurations a checked pair yields.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedPair {
    /// The decoder's.
    pub text: TextConfig,
    /// The vision tower's, when there is an mmproj.
    pub vision: Option<VisionConfig>,
}

/// What the model card says about the files: summed over both.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PairSummary {
    /// `general.name` of the text file, if it has one.
    pub name: Option<String>,
    /// Weights (elements of every tensor).
    pub parameters: u64,
    /// Bytes of both files.
    pub bytes: u64,
    /// Tensor count per ggml type.
    pub types: BTreeMap<String, u64>,
}

/// The parsed headers of a pair.
#[derive(Debug, Clone)]
pub struct PairHeaders {
    /// The text GGUF's header.
    pub text: Gguf,
    /// The mmproj's header, if there is one.
    pub mmproj: Option<Gguf>,
}

impl PairHeaders {
    /// Reads both headers (each once).
    pub async fn read<T: RangeSource, V: RangeSource>(
        text: &T,
        mmproj: Option<&V>,
    ) -> Result<PairHeaders, PairError> {
        let read = |part| move |e| in_part(part)(ModelError::Gguf(e));
        let text = Gguf::read_async(text).await.map_err(read(Part::Text))?;
        let mmproj = match mmproj {
            Some(m) => Some(Gguf::read_async(m).await.map_err(read(Part::Mmproj))?),
            None => None,
        };
        Ok(PairHeaders { text, mmproj })
    }

    /// Checks, before any weight is read, that the text file is a Gemma 3, the mmproj a Gemma 3
    /// vision tower, and that the tower projects to the decoder's width.
    pub fn check(&self) -> Result<CheckedPair, PairError> {
        let text = TextConfig::from_gguf(&self.text).map_err(in_part(Part::Text))?;
        let vision = match &self.mmproj {
            None => None,
            Some(vg) => {
                let vision = VisionConfig::from_gguf(vg).map_err(in_part(Part::Mmproj))?;
                // A missing projection reads as width 0, so it fails as a mismatch here rather
                // than as a missing tensor deep in the load.
                let out = vg
                    .tensor("mm.input_projection.weight")
                    .map_or(0, |t| t.dims[0] as usize);
                if out != text.hidden {
                    return Err(PairError::Mismatch {
                        mmproj: out,
                        text: text.hidden,
                    });
                }
                Some(vision)
            }
        };
        Ok(CheckedPair { text, vision })
    }

    /// Both headers, text first.
    pub fn files(&self) -> impl Iterator<Item = &Gguf> {
        std::iter::once(&self.text).chain(self.mmproj.as_ref())
    }

    /// Name, parameters, bytes and tensor types of both files, for the model card.
    pub fn summary(&self) -> PairSummary {
        let mut s = PairSummary {
            name: self
                .text
                .str_opt("general.name")
                .ok()
                .flatten()
                .map(String::from),
            ..Default::default()
        };
        for g in self.files() {
            s.parameters += g.tensors.iter().map(|t| t.n_elements()).sum::<u64>();
            s.bytes += g.file_size;
            for (k, v) in g.type_counts() {
                *s.types.entry(k).or_default() += v;
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::write::Writer;
    use crate::gguf::{SliceSource, Value};
    use crate::model::synthetic::{
        Shapes, mmproj_metadata, mmproj_tensors, text_metadata, text_tensors, write,
    };

    fn shapes(hidden: u64) -> Shapes {
        Shapes {
            hidden,
            layers: 1,
            heads: 2,
            kv_heads: 1,
            // Every quantised row a whole number of 256-element blocks.
            head_dim: 128,
            ffn: 256,
            vocab: 256,
            window: 16,
            v_hidden: 64,
            v_layers: 1,
            v_heads: 2,
            v_ffn: 128,
        }
    }

    fn bytes(meta: &[(String, Value)], tensors: &[crate::gguf::write::TensorSpec]) -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out, meta, tensors, 1, &mut |_, _| {}).unwrap();
        out
    }

    fn text_bytes(hidden: u64) -> Vec<u8> {
        let no_tokenizer = Writer::new().to_bytes();
        let tok = Gguf::parse_prefix(&no_tokenizer, no_tokenizer.len() as u64).unwrap();
        let s = shapes(hidden);
        bytes(&text_metadata(&s, &tok), &text_tensors(&s))
    }

    fn mmproj_bytes(hidden: u64) -> Vec<u8> {
        let s = shapes(hidden);
        bytes(&mmproj_metadata(&s), &mmproj_tensors(&s))
    }

    fn parse(b: &[u8]) -> Gguf {
        Gguf::parse_prefix(b, b.len() as u64).unwrap()
    }

    fn text(hidden: u64) -> Gguf {
        parse(&text_bytes(hidden))
    }

    fn mmproj(hidden: u64) -> Gguf {
        parse(&mmproj_bytes(hidden))
    }

    #[test]
    fn a_matching_pair_yields_both_configurations() {
        let h = PairHeaders {
            text: text(256),
            mmproj: Some(mmproj(256)),
        };
        let c = h.check().unwrap();
        assert_eq!(c.text.hidden, 256);
        assert_eq!(c.vision.unwrap().hidden, 64);
    }

    #[test]
    fn a_text_model_alone_is_a_pair_without_vision() {
        let h = PairHeaders {
            text: text(256),
            mmproj: None,
        };
        assert_eq!(h.check().unwrap().vision, None);
    }

    #[test]
    fn an_mmproj_made_for_another_width_is_refused_with_both_widths() {
        let h = PairHeaders {
            text: text(256),
            mmproj: Some(mmproj(384)),
        };
        let e = h.check().unwrap_err();
        assert!(
            matches!(
                e,
                PairError::Mismatch {
                    mmproj: 384,
                    text: 256
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "the mmproj projects to width 384 but the text model is 256 wide: they are not a pair"
        );
    }

    #[test]
    fn files_swapped_are_refused_naming_the_file_at_fault() {
        let h = PairHeaders {
            text: mmproj(256),
            mmproj: None,
        };
        let e = h.check().unwrap_err().to_string();
        assert!(e.starts_with("text model: "), "{e}");
        assert!(e.contains("\"clip\""), "{e}");
        let h = PairHeaders {
            text: text(256),
            mmproj: Some(text(256)),
        };
        let e = h.check().unwrap_err().to_string();
        assert!(e.starts_with("mmproj: "), "{e}");
        assert!(e.contains("\"gemma3\""), "{e}");
    }

    #[test]
    fn the_summary_adds_up_both_files_and_takes_the_text_name() {
        let (t, m) = (text(256), mmproj(256));
        let h = PairHeaders {
            text: t.clone(),
            mmproj: Some(m.clone()),
        };
        let s = h.summary();
        assert_eq!(
            s.name.as_deref(),
            Some("synthetic MedGemma-shaped model (random weights)")
        );
        assert_eq!(s.bytes, t.file_size + m.file_size);
        let elements = |g: &Gguf| g.tensors.iter().map(|t| t.n_elements()).sum::<u64>();
        assert_eq!(s.parameters, elements(&t) + elements(&m));
        assert_eq!(
            s.types.values().sum::<u64>(),
            (t.tensors.len() + m.tensors.len()) as u64
        );
        // The mmproj's weights are F16; the text model has none.
        assert_eq!(s.types.get("F16"), m.type_counts().get("F16"));
    }

    #[test]
    fn reading_over_sources_parses_both_headers_and_names_a_damaged_one() {
        let (t, m) = (text_bytes(256), mmproj_bytes(256));
        let h = pollster::block_on(PairHeaders::read(
            &SliceSource(&t[..]),
            Some(&SliceSource(&m[..])),
        ))
        .unwrap();
        assert_eq!(h.text.tensors.len(), parse(&t).tensors.len());
        assert_eq!(h.mmproj.unwrap().tensors.len(), parse(&m).tensors.len());
        let e = pollster::block_on(PairHeaders::read(
            &SliceSource(&t[..]),
            Some(&SliceSource(&m[..100])),
        ))
        .unwrap_err();
        assert!(
            matches!(
                e,
                PairError::File {
                    part: Part::Mmproj,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
