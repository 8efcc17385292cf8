//! The runtime API shared by the browser worker and the native CLI: load a model pair, encode
//! images, prefill, score option letters, generate; with a per-study cache of image features
//! and of the KV state of the prompt prefix the study's questions share.

use std::collections::HashMap;
use std::ops::ControlFlow;

use burn::tensor::{Device, Int, Tensor};

use crate::gguf::{Gguf, RangeSource};
use crate::image::{self, Image8, Policy};
use crate::model::load::{Loader, Progress};
use crate::model::nn::read_f32;
use crate::model::{Decoder, KvCache, ModelError, TextConfig, Vision, VisionConfig};
use crate::pair::PairHeaders;
use crate::picture::{self, Picture};
use crate::rexvqa::{Letter, Record, prompt};
use crate::tokenizer::{Tokenizer, ids};

/// A loaded MedGemma: decoder, optional vision tower, tokenizer.
pub struct Model {
    /// The Gemma 3 decoder.
    pub decoder: Decoder,
    /// The vision tower and projector (absent for text-only use).
    pub vision: Option<Vision>,
    /// The tokenizer from the text GGUF.
    pub tokenizer: Tokenizer,
    device: Device,
}

/// Options of a load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Bytes per streamed weight chunk (host read size and largest device buffer of a weight).
    pub chunk_bytes: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            chunk_bytes: crate::model::load::DEFAULT_CHUNK_BYTES,
        }
    }
}

/// Logits and probabilities of the answer letters at the answer position.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OptionScores {
    /// The letters scored, in order.
    pub letters: Vec<Letter>,
    /// Their logits.
    pub logits: Vec<f32>,
    /// Softmax over these logits only.
    pub probs: Vec<f32>,
    /// The letter with the highest logit (first on ties).
    pub best: Letter,
}

impl OptionScores {
    /// The scores of `letters` from their logits (same order).
    fn new(letters: Vec<Letter>, logits: Vec<f32>) -> Self {
        OptionScores {
            best: letters[argmax(&logits)],
            probs: softmax(&logits),
            letters,
            logits,
        }
    }
}

pub use crate::model::nn::argmax;

fn softmax(v: &[f32]) -> Vec<f32> {
    let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = v.iter().map(|x| f64::from(x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| (x / s) as f32).collect()
}

impl Model {
    /// Loads a text GGUF (and optionally its mmproj) onto `device`, streaming weights.
    pub async fn load<T: RangeSource, V: RangeSource>(
        text: &T,
        mmproj: Option<&V>,
        device: &Device,
        opts: &LoadOptions,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Model, ModelError> {
        let headers = PairHeaders {
            text: Gguf::read_async(text).await?,
            mmproj: match mmproj {
                Some(src) => Some(Gguf::read_async(src).await?),
                None => None,
            },
        };
        Model::load_with_headers(&headers, text, mmproj, device, opts, progress).await
    }

    /// [`Model::load`] from headers already read from `text` and `mmproj`, so a caller that
    /// checked the pair first (the browser worker) parses each header once per load.
    pub async fn load_with_headers<T: RangeSource, V: RangeSource>(
        headers: &PairHeaders,
        text: &T,
        mmproj: Option<&V>,
        device: &Device,
        opts: &LoadOptions,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Model, ModelError> {
        let g = &headers.text;
        let tokenizer = Tokenizer::from_gguf(g)
            .map_err(|e| ModelError::Unsupported(format!("tokenizer: {e}")))?;
        let cfg = TextConfig::from_gguf(g)?;
        let hidden = cfg.hidden;
        let vision_hdr = match (&headers.mmproj, mmproj) {
            (Some(vg), Some(src)) => Some((vg, VisionConfig::from_gguf(vg)?, src)),
            (None, None) => None,
            _ => {
                return Err(ModelError::Unsupported(
                    "an mmproj header without its file, or a file without its header".into(),
                ));
            }
        };
        let text_total: u64 = g.tensors.iter().map(|t| t.size).sum();
        let all: u64 = text_total
            + vision_hdr
                .as_ref()
                .map_or(0, |(vg, _, _)| vg.tensors.iter().map(|t| t.size).sum());
        let mut report = |p: &Progress, base: u64| {
            progress(&Progress {
                done: base + p.done,
                total: all,
                tensor: p.tensor.clone(),
            })
        };
        let decoder = {
            let mut cb = |p: &Progress| report(p, 0);
            let mut l = Loader::new(g, text, device, opts.chunk_bytes, &mut cb);
            Decoder::load(&mut l, cfg).await?
        };
        let vision = match vision_hdr {
            Some((vg, vcfg, src)) => {
                let mut cb = |p: &Progress| report(p, text_total);
                let mut l = Loader::new(vg, src, device, opts.chunk_bytes, &mut cb);
                Some(Vision::load(&mut l, vcfg, hidden).await?)
            }
            None => None,
        };
        Ok(Model {
            decoder,
            vision,
            tokenizer,
            device: device.clone(),
        })
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Image tokens per image (256 for MedGemma).
    pub fn tokens_per_image(&self) -> usize {
        self.vision
            .as_ref()
            .map_or(prompt::TOKENS_PER_IMAGE, |v| v.cfg.tokens_per_image())
    }

    fn vision(&self) -> Result<&Vision, ModelError> {
        self.vision.as_ref().ok_or_else(|| {
            ModelError::Prompt(
                "this prompt has images but no mmproj (vision) file is loaded".into(),
            )
        })
    }

    /// Decodes a PNG, JPEG or DICOM file and preprocesses it for the tower (`policy` maps
    /// 16-bit samples to 8 bits; see [`crate::picture::Picture::to_8bit`]).
    pub fn preprocess_file(&self, bytes: &[u8], policy: Policy) -> Result<Vec<f32>, ModelError> {
        let v = self.vision()?;
        let img = picture::decode(bytes).map_err(|e| ModelError::Prompt(e.to_string()))?;
        Ok(image::preprocess_with(
            &img.to_8bit(policy),
            v.cfg.image_size as u32,
            v.cfg.mean,
            v.cfg.std,
        ))
    }

    /// The 8-bit image the tower sees (`image_size`² after the resize), before normalisation.
    pub fn model_input(&self, pic: &Picture, policy: Policy) -> Result<Image8, ModelError> {
        let size = self.vision()?.cfg.image_size as u32;
        Ok(image::resize_bilinear(&pic.to_8bit(policy), size, size))
    }

    /// Projected image features `[tokens_per_image, hidden]` of a preprocessed image.
    pub fn encode_image(&self, pixels: &[f32]) -> Result<Tensor<2>, ModelError> {
        self.vision()?.encode(pixels)
    }

    /// Token ids of a rendered prompt (special tokens written literally, one `<start_of_image>`
    /// per image, expanded as Gemma3Processor expands it).
    pub fn tokenize_rendered(
        &self,
        rendered: &str,
        n_images: usize,
    ) -> Result<Vec<u32>, ModelError> {
        if self.tokens_per_image() != prompt::TOKENS_PER_IMAGE {
            return Err(ModelError::Unsupported(format!(
                "{} tokens per image (the Gemma 3 processor uses {})",
                self.tokens_per_image(),
                prompt::TOKENS_PER_IMAGE
            )));
        }
        prompt::tokenize_prompt(&self.tokenizer, rendered, n_images)
            .map_err(|e| ModelError::Prompt(e.to_string()))
    }

    /// Final hidden states of `ids` after `cache` (which is extended).
    pub fn prefill(
        &self,
        ids: &[u32],
        images: &[Tensor<2>],
        cache: &mut KvCache,
    ) -> Result<Tensor<2>, ModelError> {
        self.decoder.forward(ids, images, cache)
    }

    /// Full-vocabulary logits at the last position of `ids`.
    pub async fn last_logits(
        &self,
        ids: &[u32],
        images: &[Tensor<2>],
    ) -> Result<Vec<f32>, ModelError> {
        let mut cache = self.decoder.new_cache();
        let h = self.prefill(ids, images, &mut cache)?;
        let t = ids.len();
        read_f32(
            self.decoder
                .logits(h.slice([t - 1..t, 0..self.decoder.cfg.hidden])),
        )
        .await
    }

    /// The token ids of the answer letters as the model writes them first after
    /// `<start_of_turn>model\n` (no leading space).
    pub fn letter_ids(&self, letters: &[Letter]) -> Result<Vec<u32>, ModelError> {
        letters
            .iter()
            .map(|l| {
                self.tokenizer.token_id(&l.to_string()).ok_or_else(|| {
                    ModelError::Unsupported(format!("the vocabulary has no token {l:?}"))
                })
            })
            .collect()
    }
}

/// What a [`Session`] keeps between the questions of one study: the encoded image features and
/// the KV state of the last prompt. Kept apart from the session so that a caller answering one
/// question per request (the browser worker) can hold it between requests.
#[derive(Default)]
pub struct StudyCache {
    images: HashMap<String, Tensor<2>>,
    last: Option<(Vec<u32>, KvCache)>,
    encoded: usize,
}

impl StudyCache {
    /// Images encoded into this cache so far (a cached image is never encoded again).
    pub fn images_encoded(&self) -> usize {
        self.encoded
    }
}

/// A conversation state for one study: cached image features and the KV state of the last
/// prompt, whose longest common prefix with the next prompt is reused.
pub struct Session<'m> {
    model: &'m Model,
    cache: StudyCache,
    /// The previous study's cache after [`Session::next_study`], kept until this study's first
    /// image is encoded or its first prompt runs.
    retired: Option<StudyCache>,
    /// An image was encoded since the last pass: the free pages are given back before the next
    /// one, once the encode has run ([`Session::add_image`]).
    shed_after_encode: bool,
    /// Prompt tokens actually computed by the last call (the rest came from the cache).
    pub last_computed: usize,
}

impl<'m> Session<'m> {
    /// A session without cached state.
    pub fn new(model: &'m Model) -> Self {
        Self::with_cache(model, StudyCache::default())
    }

    /// A session that goes on from `cache` (which must come from a session of the same model).
    pub fn with_cache(model: &'m Model, cache: StudyCache) -> Self {
        Session {
            model,
            cache,
            retired: None,
            shed_after_encode: false,
            last_computed: 0,
        }
    }

    /// The cached state, for a later [`Session::with_cache`].
    pub fn into_cache(self) -> StudyCache {
        self.cache
    }

    /// Forgets everything now.
    pub fn clear(&mut self) {
        self.cache = StudyCache::default();
        self.retired = None;
    }

    /// Moves on to another study: nothing cached so far is used again, and it is dropped once
    /// this study's first image is encoded (or its first prompt runs), not now. In the browser's
    /// pool (a page per allocation) the old features' and KV's pages, freed first, would be taken
    /// by the next image encode's temporaries, whose own pages would then sit free while the new
    /// study's KV made new ones, so the pool would grow study by study
    /// (bench/results/ci-vm-2core-bench-memory-dry-run.json; examples/pool_memory.rs
    /// `--studies`). On the CPU, where freed memory serves any size and a wasm32 4B pair has
    /// little to spare, the cache is dropped now.
    pub fn next_study(&mut self) {
        if crate::device::queues_work(self.model.device()) {
            self.retired = Some(std::mem::take(&mut self.cache));
        } else {
            self.clear();
        }
    }

    /// Cached image features for `key` (an image path and policy), if encoded already.
    pub fn cached_image(&self, key: &str) -> Option<Tensor<2>> {
        self.cache.images.get(key).cloned()
    }

    /// Encodes a preprocessed image and caches its features under `key`.
    ///
    /// In the browser's pool (a page per allocation, kept through ~5,000 allocations; natively
    /// `REXVQA_EXCLUSIVE_POOL=1`) a free page serves only an allocation up to its size, so the
    /// last study's pages would sit free beside the encode's new ones, and the encode's beside
    /// the next pass's, leaving the browser's pool above native's. The free pages are given back
    /// before the encode when the session has moved on (the last study's work was read back),
    /// and before the next pass, once the encode has run (a buffer destroyed while queued work
    /// still uses it is freed only when that work is done, which the next pass's new pages would
    /// overlap); that brings it under native's
    /// (bench/results/ci-vm-2core-shed-pages-around-encodes.json; examples/pool_memory.rs
    /// `--studies`). The native pool carves any size from its pages and is left as it is.
    pub fn add_image(&mut self, key: &str, pixels: &[f32]) -> Result<Tensor<2>, ModelError> {
        if self.retired.is_some() {
            self.shed_free_pages()?;
        }
        let feats = self.model.encode_image(pixels)?;
        self.retired = None;
        self.shed_after_encode = crate::device::exclusive_pool_requested();
        self.cache.encoded += 1;
        self.cache.images.insert(key.to_string(), feats.clone());
        Ok(feats)
    }

    /// Gives the pools' free pages back where the pool keeps a page per allocation.
    fn shed_free_pages(&self) -> Result<(), ModelError> {
        if !crate::device::exclusive_pool_requested() {
            return Ok(());
        }
        Ok(crate::device::release_free_memory(self.model.device())?)
    }

    /// Before a pass: after an image encode, waits for it to run and gives the free pages back
    /// (see [`Session::add_image`]).
    async fn before_pass(&mut self) -> Result<(), ModelError> {
        // Set only where the pool keeps a page per allocation (`add_image`).
        if std::mem::take(&mut self.shed_after_encode) {
            crate::device::release_after_queued_work(self.model.device()).await?;
        }
        Ok(())
    }

    /// The model this session runs.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// Prefills `ids`, reusing the cached KV state of the longest shared prefix that does not
    /// cut an image; returns the hidden state of the last position `[1, hidden]`.
    fn run(
        &mut self,
        ids: &[u32],
        images: &[Tensor<2>],
    ) -> Result<(Tensor<2>, KvCache), ModelError> {
        self.retired = None;
        // The last prompt's cache is taken rather than cloned and cut back in place: this
        // prompt writes over the positions past the shared prefix, where a clone would copy
        // every layer's buffers first (a dispatch per layer's keys and values, and a second set
        // of buffers: 143 MB for MedGemma 4B). A cache something else still holds (the one `run`
        // last returned, while its caller keeps it) is copied on its first write all the same
        // (`LayerKv::reserve` counts the holders).
        let (mut cache, start) = match self.cache.last.take() {
            Some((prev, mut cache)) => {
                let mut lcp = prev
                    .iter()
                    .zip(ids)
                    .take_while(|(a, b)| a == b)
                    .count()
                    .min(ids.len() - 1);
                // Image tokens attend both ways inside their run: never reuse part of one.
                while lcp > 0 && ids[lcp] == ids::IMAGE_SOFT && ids[lcp - 1] == ids::IMAGE_SOFT {
                    lcp -= 1;
                }
                cache.truncate(lcp);
                (cache, lcp)
            }
            None => (self.model.decoder.new_cache(), 0),
        };
        let images_before = count_image_runs(&ids[..start]);
        let rest = &ids[start..];
        let h = match self
            .model
            .prefill(rest, &images[images_before..], &mut cache)
        {
            Ok(h) => h,
            Err(e) => {
                // A pass writes only after `start`, so the positions before it still hold.
                cache.truncate(start);
                self.cache.last = Some((ids[..start].to_vec(), cache));
                return Err(e);
            }
        };
        self.last_computed = rest.len();
        let t = rest.len();
        let last = h.slice([t - 1..t, 0..self.model.decoder.cfg.hidden]);
        self.cache.last = Some((ids.to_vec(), cache.clone()));
        Ok((last, cache))
    }

    /// Logits and probabilities of `letters` at the answer position of `ids`.
    pub async fn score_options(
        &mut self,
        ids: &[u32],
        images: &[Tensor<2>],
        letters: &[Letter],
    ) -> Result<OptionScores, ModelError> {
        let letter_ids = self.model.letter_ids(letters)?;
        self.before_pass().await?;
        let (h, _) = self.run(ids, images)?;
        let logits = read_f32(self.model.decoder.logits_for(h, &letter_ids)).await?;
        Ok(OptionScores::new(letters.to_vec(), logits))
    }

    /// Scores several prompts over the same `images` (one study's questions) in one pass: their
    /// shared prefix is prefilled once (or reused from the cache) and every prompt's remainder,
    /// image tokens included, runs as a separate branch of a single forward pass, so each
    /// weight is read once for all of them.
    pub async fn score_many(
        &mut self,
        prompts: &[(Vec<u32>, Vec<Letter>)],
        images: &[Tensor<2>],
    ) -> Result<Vec<OptionScores>, ModelError> {
        if let [(p, letters)] = prompts {
            return Ok(vec![self.score_options(p, images, letters).await?]);
        }
        let lcp = branch_point(prompts.iter().map(|(p, _)| p.as_slice()));
        if lcp == 0 {
            let mut out = Vec::with_capacity(prompts.len());
            for (p, letters) in prompts {
                out.push(self.score_options(p, images, letters).await?);
            }
            return Ok(out);
        }
        // Prefill the prefix (its last token is recomputed: `run` always computes one).
        self.before_pass().await?;
        let first = &prompts[0].0;
        let in_prefix = count_image_runs(&first[..lcp]).min(images.len());
        let (_, cache) = self.run(&first[..lcp], &images[..in_prefix])?;
        let prefix_computed = self.last_computed;
        let rest = &images[in_prefix..];
        let branches: Vec<(&[u32], &[Tensor<2>])> =
            prompts.iter().map(|(p, _)| (&p[lcp..], rest)).collect();
        let h = self.model.decoder.forward_branches(&branches, &cache)?;
        self.last_computed = prefix_computed + branches.iter().map(|b| b.0.len()).sum::<usize>();
        // One readback for all: the logits of every letter any prompt offers.
        let mut all: Vec<Letter> = Vec::new();
        for l in prompts.iter().flat_map(|(_, l)| l) {
            if !all.contains(l) {
                all.push(*l);
            }
        }
        let all_ids = self.model.letter_ids(&all)?;
        let logits = read_f32(self.model.decoder.logits_for(h, &all_ids)).await?;
        Ok(prompts
            .iter()
            .enumerate()
            .map(|(i, (_, letters))| {
                let row = &logits[i * all.len()..(i + 1) * all.len()];
                let logits: Vec<f32> = letters
                    .iter()
                    .map(|l| row[all.iter().position(|a| a == l).unwrap_or(0)])
                    .collect();
                OptionScores::new(letters.clone(), logits)
            })
            .collect())
    }

    /// Greedy decoding of at most `max_new` tokens, stopping at `<eos>` or `<end_of_turn>`, or
    /// where `on_token` (which sees each token id and the text decoded so far) breaks. Returns
    /// the generated ids.
    pub async fn generate(
        &mut self,
        ids: &[u32],
        images: &[Tensor<2>],
        max_new: usize,
        on_token: &mut dyn FnMut(u32, &str) -> ControlFlow<()>,
    ) -> Result<Vec<u32>, ModelError> {
        self.before_pass().await?;
        let (h, mut cache) = self.run(ids, images)?;
        // The session keeps the prompt's cache for the next prompt. The generated tokens go after
        // the prompt in the same buffers, not in a copy of them (a dispatch per layer's keys and
        // values, and a second set of buffers), and the kept cache is cut back to the prompt:
        // it never reads past it.
        self.cache.last = None;
        let out = self.decode(h, &mut cache, max_new, on_token).await;
        cache.truncate(ids.len());
        self.cache.last = Some((ids.to_vec(), cache));
        out
    }

    /// [`Session::generate`] for several prompts over the same `images` (one study's questions
    /// in official mode): their shared prefix is prefilled once and their remainders run as
    /// branches of one pass, as [`Session::score_many`] runs them, each keeping its own keys;
    /// then each reply is decoded from its own cache. `on_token` also gets the prompt's index.
    /// Returns each prompt's generated ids.
    pub async fn generate_many(
        &mut self,
        prompts: &[Vec<u32>],
        images: &[Tensor<2>],
        max_new: usize,
        on_token: &mut dyn FnMut(usize, u32, &str) -> ControlFlow<()>,
    ) -> Result<Vec<Vec<u32>>, ModelError> {
        let lcp = branch_point(prompts.iter().map(Vec::as_slice));
        if prompts.len() < 2 || lcp == 0 {
            let mut out = Vec::with_capacity(prompts.len());
            for (i, p) in prompts.iter().enumerate() {
                out.push(
                    self.generate(p, images, max_new, &mut |id, text| on_token(i, id, text))
                        .await?,
                );
            }
            return Ok(out);
        }
        self.before_pass().await?;
        let first = &prompts[0];
        let in_prefix = count_image_runs(&first[..lcp]).min(images.len());
        let (_, cache) = self.run(&first[..lcp], &images[..in_prefix])?;
        let prefix_computed = self.last_computed;
        let rest = &images[in_prefix..];
        let branches: Vec<(&[u32], &[Tensor<2>])> =
            prompts.iter().map(|p| (&p[lcp..], rest)).collect();
        let (h, caches) = self
            .model
            .decoder
            .forward_branches_kept(&branches, &cache)?;
        drop(cache);
        self.last_computed = prefix_computed + branches.iter().map(|b| b.0.len()).sum::<usize>();
        let hidden = self.model.decoder.cfg.hidden;
        let mut out = Vec::with_capacity(prompts.len());
        for (i, mut cache) in caches.into_iter().enumerate() {
            let h = h.clone().slice([i..i + 1, 0..hidden]);
            let ids = self
                .decode(h, &mut cache, max_new, &mut |id, text| {
                    on_token(i, id, text)
                })
                .await?;
            out.push(ids);
        }
        Ok(out)
    }

    /// [`Session::generate`]'s tokens after the prompt's last hidden state `h`, whose keys and
    /// values `cache` holds.
    async fn decode(
        &self,
        h: Tensor<2>,
        cache: &mut KvCache,
        max_new: usize,
        on_token: &mut dyn FnMut(u32, &str) -> ControlFlow<()>,
    ) -> Result<Vec<u32>, ModelError> {
        let stops = [ids::EOS, ids::END_OF_TURN, self.model.tokenizer.eos()];
        let decoder = &self.model.decoder;
        // The next token's id stays on the device. A GPU gets the step after it queued before
        // the id is read back, so it never idles while the host checks for a stop token (a stop
        // wastes that one step). The CPU runs each operation as it is called, where running
        // ahead only adds that wasted step, so there the step follows the check.
        // Without the device argmax (turned off by the self-test) each id is read back anyway.
        let run_ahead = crate::device::queues_work(decoder.device())
            && crate::kernels::forms::enabled(crate::kernels::forms::Form::DeviceArgmax);
        let mut pending = decoder.next_token(h).await?;
        let mut out = Vec::new();
        for step in 0..max_new {
            let more = step + 1 < max_new;
            let ahead = (more && run_ahead)
                .then(|| decoder.greedy(decoder.forward_token(pending.clone(), cache)));
            let next = read_u32(pending.clone()).await?[0];
            if stops.contains(&next) {
                break;
            }
            out.push(next);
            // A step already queued ahead is dropped unread, as at a stop token.
            let flow = on_token(next, &self.model.tokenizer.decode(&out, true));
            if !more || flow.is_break() {
                break;
            }
            pending = match ahead {
                Some(a) => a,
                None => {
                    decoder
                        .next_token(decoder.forward_token(pending, cache))
                        .await?
                }
            };
        }
        Ok(out)
    }
}

/// Where several prompts branch: the length of their shared prefix, less what each needs of
/// its own (at least its last token) and never inside an image run; 0 when they share nothing
/// worth a pass of its own.
fn branch_point<'a>(prompts: impl Iterator<Item = &'a [u32]> + Clone) -> usize {
    let Some(first) = prompts.clone().next() else {
        return 0;
    };
    let mut lcp = prompts.fold(first.len(), |n, p| {
        let shared = first.iter().zip(p).take(n).take_while(|(a, b)| a == b);
        shared.count().min(p.len().saturating_sub(1))
    });
    while lcp > 0 && first[lcp] == ids::IMAGE_SOFT && first[lcp - 1] == ids::IMAGE_SOFT {
        lcp -= 1;
    }
    lcp
}

/// A small u32 tensor's values on the host.
async fn read_u32(t: Tensor<1, Int>) -> Result<Vec<u32>, ModelError> {
    crate::launches::note_read();
    t.into_data_async()
        .await
        .map_err(|e| ModelError::Readback(format!("{e:?}")))?
        .try_into_vec::<u32>()
        .map_err(|e| ModelError::Readback(format!("{e:?}")))
}

fn count_image_runs(ids: &[u32]) -> usize {
    ids.iter()
        .enumerate()
        .filter(|(i, t)| **t == ids::IMAGE_SOFT && (*i == 0 || ids[i - 1] != ids::IMAGE_SOFT))
        .count()
}

/// How a ReXVQA question is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Option-letter logits at the answer position, no decoding.
    Fast,
    /// Greedy decoding of up to 256 tokens and the official extraction (as ReXrank's script).
    Official,
}

/// The official prompt of a record with `n_images` images, rendered and tokenised.
pub fn record_prompt(model: &Model, r: &Record, n_images: usize) -> Result<Vec<u32>, ModelError> {
    model.tokenize_rendered(&prompt::official_chat(r, n_images), n_images)
}
