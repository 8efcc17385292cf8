//! The opened dataset: indexing a picked folder and reading its split files, unpacking image
//! archives into browser storage, the dataset's counts, and what the study viewer asks for (a
//! page of questions, one question, an image's pixels).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use rexvqa_engine::eval::ImageStore;
use rexvqa_engine::image;
use rexvqa_engine::rexvqa::{QuestionFilter, Split, folder};
use web_sys::File;

use super::error::WorkerError;
use super::reply::Replies;
use super::state::{self, FileStore};
use crate::io::read_blob;
use crate::protocol::{DatasetSummary, Event};
use crate::unpack;

/// An attached file and its path.
type Named = (String, File);

/// Opens picked files (`paths[i]` is `list[i]`'s path in the picked folder): split files and
/// images are indexed, archive parts unpacked afterwards.
pub async fn open(out: Replies, paths: Vec<String>, list: Vec<File>) -> Result<(), WorkerError> {
    if paths.len() != list.len() {
        return Err(format!("{} paths for {} files", paths.len(), list.len()).into());
    }
    let (archives, rest): (Vec<Named>, Vec<Named>) = paths
        .into_iter()
        .zip(list)
        .partition(|(p, _)| unpack::is_archive(p));
    let unpacked = Rc::new(unpack::load_index().await.unwrap_or_default());
    state::with(|s| s.unpacked = unpacked);
    // Parts picked on their own add images to the open splits (or to none yet).
    if !rest.is_empty() || archives.is_empty() {
        out.post(Event::Dataset(index_folder(rest).await?));
    }
    if !archives.is_empty() {
        unpack_archives(out, archives).await?;
    }
    Ok(())
}

/// Unpacks archive parts into browser storage, then reports the dataset again.
async fn unpack_archives(out: Replies, parts: Vec<Named>) -> Result<(), WorkerError> {
    if state::with(|s| s.unpack_cancel.is_some()) {
        return Err(WorkerError::Busy(
            "an archive is already being unpacked: wait for it or stop it".into(),
        ));
    }
    // Only what the open splits reference; every image when no split is open yet.
    let want: Option<HashSet<String>> = state::with(|s| {
        (!s.splits.is_empty()).then(|| s.splits.values().flat_map(|sp| sp.image_paths()).collect())
    });
    let cancel = Rc::new(Cell::new(false));
    state::with(|s| s.unpack_cancel = Some(cancel.clone()));
    let result = unpack::unpack(parts, want, cancel, |p| out.post(Event::Unpack(p.clone()))).await;
    let index = unpack::load_index().await;
    let any_split = state::with(|s| {
        s.unpack_cancel = None;
        if let Ok(i) = &index {
            s.unpacked = Rc::new(i.clone());
        }
        !s.splits.is_empty()
    });
    // Counts change whether it finished or not.
    if any_split {
        out.post(Event::Dataset(current_summary()));
    }
    out.post(Event::Unpack(result?));
    Ok(())
}

/// Stops the unpacking in progress (what is unpacked stays).
pub fn cancel_unpack() {
    if let Some(c) = state::with(|s| s.unpack_cancel.clone()) {
        c.set(true);
    }
}

/// Deletes the unpacked images and reports the dataset again.
pub async fn delete_unpacked(out: Replies) -> Result<(), WorkerError> {
    if state::with(|s| s.unpack_cancel.is_some()) {
        return Err(WorkerError::Busy("stop the unpacking first".into()));
    }
    unpack::delete().await?;
    state::with(|s| s.unpacked = Rc::default());
    out.post(Event::Dataset(current_summary()));
    Ok(())
}

/// The open dataset's counts as they stand.
fn current_summary() -> DatasetSummary {
    let store = FileStore::current();
    state::with(|s| {
        let mut d = s.summary.clone();
        d.missing_images = s
            .splits
            .iter()
            .map(|(name, sp)| {
                let missing = sp.image_paths().iter().filter(|p| !store.has(p)).count();
                (name.clone(), missing)
            })
            .collect();
        d.unpacked_images = s.unpacked.len();
        d
    })
}

/// Indexes a picked folder (or picked JSON/PNG files) and reads its split files.
async fn index_folder(pairs: Vec<Named>) -> Result<DatasetSummary, WorkerError> {
    let mut map = HashMap::new();
    for (p, f) in pairs {
        for key in folder::index_keys(&p) {
            map.insert(key, f.clone());
        }
    }
    let mut summary = DatasetSummary {
        png_files: map.keys().filter(|k| folder::is_image_key(k)).count(),
        ..Default::default()
    };
    let mut splits = BTreeMap::new();
    let jsons: Vec<Named> = map
        .iter()
        .filter(|(k, _)| folder::is_split_file(k))
        .map(|(k, f)| (k.clone(), f.clone()))
        .collect();
    for (path, f) in jsons {
        let name = folder::split_name(&path);
        let text = match read_blob(&f).await.map(String::from_utf8) {
            Ok(Ok(t)) => t,
            _ => {
                summary
                    .warnings
                    .push(format!("{path}: not readable as UTF-8 text"));
                continue;
            }
        };
        match Split::from_json(&text) {
            Ok(s) if !s.records.is_empty() => {
                summary.splits.insert(name.clone(), s.summary());
                splits.insert(name, Rc::new(s));
            }
            Ok(_) => summary
                .warnings
                .push(format!("{path}: no usable question records")),
            Err(e) => summary.warnings.push(format!("{path}: {e}")),
        }
    }
    if splits.is_empty() {
        return Err("no ReXVQA split file found: pick the folder that holds metadata/test_vqa_data.json (or valid_vqa_data.json) and deid_png/".into());
    }
    state::with(|s| {
        s.files = Rc::new(map);
        s.splits = splits;
        s.study = None;
        s.summary = summary;
    });
    Ok(current_summary())
}

/// A page of an open split's questions.
pub fn list_questions(
    split: &str,
    filter: &QuestionFilter,
    offset: usize,
    limit: usize,
) -> Result<Event, WorkerError> {
    let s = state::split(split)?;
    Ok(Event::Questions(s.list_questions(filter, offset, limit)))
}

/// One question of an open split, with which of its images are at hand.
pub fn question(split: &str, id: &str) -> Result<Event, WorkerError> {
    let files = FileStore::current();
    let d = state::split(split)?
        .question_detail(split, id, |p| files.has(p))
        .ok_or_else(|| format!("question {id} is not in split {split}"))?;
    Ok(Event::Question(d))
}

/// Posts an image's decoded samples (u16, channels interleaved) for the viewer.
pub async fn image(out: Replies, path: &str) -> Result<(), WorkerError> {
    let bytes = FileStore::current().read(path).await?;
    let d = image::decode(&bytes).map_err(|e| format!("{path}: {e}"))?;
    out.post_pixels(path, &d);
    Ok(())
}
