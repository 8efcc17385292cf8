//! The Gemma 3 tokenizer, built from a GGUF's `tokenizer.ggml.*` metadata.
//!
//! SentencePiece BPE as llama.cpp runs it (ref: llama.cpp src/llama-vocab.cpp,
//! `llm_tokenizer_spm_session`): spaces become `▁`, the text is split into characters, and the
//! adjacent pair whose concatenation is the highest-scoring vocabulary entry is merged until no
//! pair is in the vocabulary; characters left over are emitted as `<0xXX>` byte tokens. Special
//! tokens are cut out of the text first: user-defined ones (newline/space runs, HTML tags,
//! `<start_of_image>`) always, control ones (`<bos>`, `<start_of_turn>`) only when asked.
//!
//! Written here rather than taken from the `tokenizers` crate because the vocabulary must come
//! from the GGUF the user loads (the crate wants a `tokenizer.json`, which GGUF files lack), and
//! because the crate pulls `onig`/`esaxx` C code that does not build for wasm32 without
//! feature surgery; this module is ~250 lines and checked id-for-id against the Hugging Face
//! tokenizer on 10,000 strings.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use crate::gguf::{Array, Gguf, GgufError};

/// Token ids with a fixed role in Gemma 3 checkpoints.
pub mod ids {
    /// `<pad>`.
    pub const PAD: u32 = 0;
    /// `<eos>`.
    pub const EOS: u32 = 1;
    /// `<bos>`.
    pub const BOS: u32 = 2;
    /// `<start_of_turn>`.
    pub const START_OF_TURN: u32 = 105;
    /// `<end_of_turn>`.
    pub const END_OF_TURN: u32 = 106;
    /// `<start_of_image>`.
    pub const START_OF_IMAGE: u32 = 255_999;
    /// `<end_of_image>`.
    pub const END_OF_IMAGE: u32 = 256_000;
    /// `<image_soft_token>`: not in the GGUF vocabulary; its embeddings are injected.
    pub const IMAGE_SOFT: u32 = 262_144;
}

/// Errors building a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Metadata problem.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A tokenizer model other than SentencePiece (`llama`).
    #[error(
        "tokenizer.ggml.model is {0:?}; only the SentencePiece (\"llama\") tokenizer of Gemma is supported"
    )]
    UnsupportedModel(String),
    /// Arrays of different lengths or wrong element types.
    #[error("tokenizer metadata is inconsistent: {0}")]
    Inconsistent(String),
}

/// ref: llama.cpp `llama_token_type` / `LLAMA_TOKEN_TYPE_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// Ordinary piece.
    Normal,
    /// `<unk>`.
    Unknown,
    /// Control token (`<bos>`, `<start_of_turn>`, `<unusedN>`).
    Control,
    /// User-defined token, always matched as a whole (`\n\n`, `<start_of_image>`).
    UserDefined,
    /// Unused slot.
    Unused,
    /// `<0xXX>` byte-fallback token.
    Byte,
}

impl TokenType {
    fn from_i32(v: i32) -> Option<Self> {
        Some(match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }
}

/// A Gemma tokenizer.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    tokens: Vec<String>,
    scores: Vec<f32>,
    types: Vec<TokenType>,
    lookup: HashMap<String, u32>,
    byte_tokens: [u32; 256],
    /// Special tokens by first char, longest first: (text, id, is_control).
    specials: HashMap<char, Vec<(String, u32, bool)>>,
    bos: u32,
    eos: u32,
    add_bos: bool,
}

/// What a text fragment is after cutting out special tokens.
enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

#[derive(PartialEq)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    // Highest score first; ties go to the leftmost pair, as llama.cpp's comparator does.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Tokenizer {
    /// Builds the tokenizer from GGUF metadata.
    pub fn from_gguf(g: &Gguf) -> Result<Self, TokenizerError> {
        let model = g.str("tokenizer.ggml.model")?;
        if model != "llama" {
            return Err(TokenizerError::UnsupportedModel(model.to_string()));
        }
        let tokens = match g.array("tokenizer.ggml.tokens")? {
            Array::String(v) => v.clone(),
            a => {
                return Err(TokenizerError::Inconsistent(format!(
                    "tokens are {}s, not strings",
                    a.element_type()
                )));
            }
        };
        let n = tokens.len();
        let scores = match g.get("tokenizer.ggml.scores") {
            None => vec![0.0; n],
            Some(_) => match g.array("tokenizer.ggml.scores")? {
                Array::F32(v) => v.clone(),
                a => {
                    return Err(TokenizerError::Inconsistent(format!(
                        "scores are {}s",
                        a.element_type()
                    )));
                }
            },
        };
        let types = match g.get("tokenizer.ggml.token_type") {
            None => vec![TokenType::Normal; n],
            Some(_) => match g.array("tokenizer.ggml.token_type")? {
                Array::I32(v) => v
                    .iter()
                    .map(|&t| {
                        TokenType::from_i32(t).ok_or_else(|| {
                            TokenizerError::Inconsistent(format!("unknown token type {t}"))
                        })
                    })
                    .collect::<Result<_, _>>()?,
                a => {
                    return Err(TokenizerError::Inconsistent(format!(
                        "token types are {}s",
                        a.element_type()
                    )));
                }
            },
        };
        if scores.len() != n || types.len() != n {
            return Err(TokenizerError::Inconsistent(format!(
                "{n} tokens but {} scores and {} types",
                scores.len(),
                types.len()
            )));
        }
        let id = |key: &str, default: u32| -> Result<u32, TokenizerError> {
            Ok(g.u64_opt(key)?.map_or(default, |v| v as u32))
        };
        let bos = id("tokenizer.ggml.bos_token_id", ids::BOS)?;
        let eos = id("tokenizer.ggml.eos_token_id", ids::EOS)?;
        // ref: llama.cpp defaults add_bos to true for SPM vocabularies.
        let add_bos = g.bool_opt("tokenizer.ggml.add_bos_token")?.unwrap_or(true);
        Self::new(tokens, scores, types, bos, eos, add_bos)
    }

    /// Builds the tokenizer from its parts.
    pub fn new(
        tokens: Vec<String>,
        scores: Vec<f32>,
        types: Vec<TokenType>,
        bos: u32,
        eos: u32,
        add_bos: bool,
    ) -> Result<Self, TokenizerError> {
        let mut lookup = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            // First id wins for duplicate texts, as in llama.cpp's token_to_id map.
            lookup.entry(t.clone()).or_insert(i as u32);
        }
        let mut byte_tokens = [u32::MAX; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let name = format!("<0x{b:02X}>");
            *slot = *lookup.get(&name).ok_or_else(|| {
                TokenizerError::Inconsistent(format!("byte-fallback token {name} is missing"))
            })?;
        }
        let mut specials: HashMap<char, Vec<(String, u32, bool)>> = HashMap::new();
        for (i, t) in tokens.iter().enumerate() {
            let control = match types[i] {
                TokenType::Control | TokenType::Unknown => true,
                TokenType::UserDefined => false,
                _ => continue,
            };
            if let Some(c) = t.chars().next() {
                specials
                    .entry(c)
                    .or_default()
                    .push((t.clone(), i as u32, control));
            }
        }
        for v in specials.values_mut() {
            v.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        }
        if bos as usize >= tokens.len() || eos as usize >= tokens.len() {
            return Err(TokenizerError::Inconsistent(format!(
                "bos {bos} / eos {eos} outside the {} tokens",
                tokens.len()
            )));
        }
        Ok(Tokenizer {
            tokens,
            scores,
            types,
            lookup,
            byte_tokens,
            specials,
            bos,
            eos,
            add_bos,
        })
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The beginning-of-sequence id.
    pub fn bos(&self) -> u32 {
        self.bos
    }

    /// The end-of-sequence id.
    pub fn eos(&self) -> u32 {
        self.eos
    }

    /// Whether the file asks for a BOS token at the start of every encoding.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// The id of a token text, if it is in the vocabulary.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.lookup.get(text).copied()
    }

    /// The text of a token id.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The type of a token id.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// Encodes text as llama.cpp does with `add_special` and `parse_special`: a BOS first when
    /// `add_special` and the file asks for it; control tokens written in the text recognised
    /// when `parse_special`.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.push(self.bos);
        }
        for fragment in self.partition(text, parse_special) {
            match fragment {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(t) => self.encode_piece(t, &mut out),
            }
        }
        out
    }

    /// Cuts special tokens out of `text`, leftmost first and longest at each position.
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < text.len() {
            let c = text[i..].chars().next().expect("i is on a char boundary");
            let hit = self.specials.get(&c).and_then(|cands| {
                cands.iter().find(|(t, _, control)| {
                    (parse_special || !*control) && text[i..].starts_with(t.as_str())
                })
            });
            match hit {
                Some((t, id, _)) => {
                    if start < i {
                        out.push(Fragment::Text(&text[start..i]));
                    }
                    out.push(Fragment::Token(*id));
                    i += t.len();
                    start = i;
                }
                None => i += c.len_utf8(),
            }
        }
        if start < text.len() {
            out.push(Fragment::Text(&text[start..]));
        }
        out
    }

    /// SentencePiece BPE over one fragment without special tokens.
    fn encode_piece(&self, text: &str, out: &mut Vec<u32>) {
        let text = text.replace(' ', "\u{2581}");
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (idx, (start, c)) in text.char_indices().enumerate() {
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: idx.checked_sub(1),
                next: None,
            });
            if idx > 0 {
                symbols[idx - 1].next = Some(idx);
            }
        }
        let mut queue = BinaryHeap::new();
        let mut rev_merge: HashMap<(usize, usize), (usize, usize)> = HashMap::new();
        let try_add =
            |left: Option<usize>,
             right: Option<usize>,
             symbols: &[Symbol],
             queue: &mut BinaryHeap<Bigram>,
             rev_merge: &mut HashMap<(usize, usize), (usize, usize)>| {
                let (Some(l), Some(r)) = (left, right) else {
                    return;
                };
                let (s, len) = (symbols[l].start, symbols[l].len + symbols[r].len);
                let Some(&id) = self.lookup.get(&text[s..s + len]) else {
                    return;
                };
                queue.push(Bigram {
                    left: l,
                    right: r,
                    score: self.scores[id as usize],
                    size: len,
                });
                rev_merge.insert((s, len), (l, r));
            };
        for i in 1..symbols.len() {
            try_add(Some(i - 1), Some(i), &symbols, &mut queue, &mut rev_merge);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // Skip pairs whose symbols were merged away since the pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            let left = symbols[b.left];
            try_add(
                left.prev,
                Some(b.left),
                &symbols,
                &mut queue,
                &mut rev_merge,
            );
            try_add(
                Some(b.left),
                left.next,
                &symbols,
                &mut queue,
                &mut rev_merge,
            );
        }
        let mut i = (!symbols.is_empty()).then_some(0);
        while let Some(idx) = i {
            let s = symbols[idx];
            self.resegment(&text, &symbols, s.start, s.len, &rev_merge, out);
            i = s.next;
        }
    }

    /// Emits a merged symbol as its token, or splits it back along the merge that made it, or
    /// falls back to byte tokens.
    fn resegment(
        &self,
        text: &str,
        symbols: &[Symbol],
        start: usize,
        len: usize,
        rev_merge: &HashMap<(usize, usize), (usize, usize)>,
        out: &mut Vec<u32>,
    ) {
        let piece = &text[start..start + len];
        if let Some(&id) = self.lookup.get(piece) {
            out.push(id);
            return;
        }
        match rev_merge.get(&(start, len)) {
            Some(&(l, r)) => {
                let left_len = symbols[r].start - symbols[l].start;
                self.resegment(text, symbols, start, left_len, rev_merge, out);
                self.resegment(
                    text,
                    symbols,
                    start + left_len,
                    len - left_len,
                    rev_merge,
                    out,
                );
            }
            None => out.extend(piece.bytes().map(|b| self.byte_tokens[b as usize])),
        }
    }

    /// Decodes ids to text: `▁` becomes a space, byte tokens become bytes (invalid UTF-8 is
    /// replaced), control tokens are dropped when `skip_special`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(t) = self.tokens.get(id as usize) else {
                continue;
            };
            match self.types[id as usize] {
                TokenType::Byte => {
                    let hex = &t[3..5];
                    if let Ok(b) = u8::from_str_radix(hex, 16) {
                        bytes.push(b);
                    }
                }
                TokenType::Control | TokenType::Unknown | TokenType::Unused if skip_special => {}
                _ => bytes.extend_from_slice(t.replace('\u{2581}', " ").as_bytes()),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy vocabulary: bytes, a few pieces with scores, and specials.
    fn toy() -> Tokenizer {
        let mut tokens: Vec<String> = vec!["<pad>".into(), "<eos>".into(), "<bos>".into()];
        let mut types = vec![TokenType::Control; 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(TokenType::Byte);
        }
        let pieces = [
            ("a", -10.0),
            ("b", -10.0),
            ("c", -10.0),
            ("▁", -10.0),
            ("ab", -1.0),
            ("bc", -0.5),
            ("abc", -2.0),
            ("▁a", -3.0),
        ];
        let mut scores = vec![0.0; tokens.len()];
        for (p, s) in pieces {
            tokens.push(p.into());
            types.push(TokenType::Normal);
            scores.push(s);
        }
        tokens.push("\n\n".into());
        types.push(TokenType::UserDefined);
        scores.push(0.0);
        tokens.push("<start_of_turn>".into());
        types.push(TokenType::Control);
        scores.push(0.0);
        Tokenizer::new(tokens, scores, types, 2, 1, true).unwrap()
    }

    fn texts(t: &Tokenizer, ids: &[u32]) -> Vec<String> {
        ids.iter()
            .map(|&i| t.token_text(i).unwrap().to_string())
            .collect()
    }

    #[test]
    fn highest_score_pair_merges_first() {
        let t = toy();
        // "bc" (-0.5) beats "ab" (-1.0); then "a"+"bc" = "abc" is in the vocabulary.
        assert_eq!(texts(&t, &t.encode("abc", false, false)), ["abc"]);
        // "ab" then nothing joins "ab"+"a".
        assert_eq!(texts(&t, &t.encode("aba", false, false)), ["ab", "a"]);
        assert_eq!(texts(&t, &t.encode(" a", false, false)), ["▁a"]);
    }

    #[test]
    fn unknown_characters_fall_back_to_bytes() {
        let t = toy();
        assert_eq!(
            texts(&t, &t.encode("é", false, false)),
            ["<0xC3>", "<0xA9>"]
        );
        assert_eq!(t.decode(&t.encode("é a", false, false), true), "é a");
    }

    #[test]
    fn specials_respect_parse_special_and_bos() {
        let t = toy();
        let ids = t.encode("<start_of_turn>a\n\nb", true, true);
        assert_eq!(
            texts(&t, &ids),
            ["<bos>", "<start_of_turn>", "a", "\n\n", "b"]
        );
        // Without parse_special the control token is spelled out; "\n\n" is user-defined and
        // is always matched.
        let ids = t.encode("<start_of_turn>\n\n", false, false);
        assert_eq!(ids[0], t.byte_tokens[b'<' as usize]);
        assert_eq!(t.token_text(*ids.last().unwrap()), Some("\n\n"));
        assert_eq!(t.decode(&[2, 259], true), "a");
    }
}
