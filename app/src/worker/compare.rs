//! Two runs compared: each side a run stored here or an attached predictions file, both read as
//! leaderboard predictions, so a stored run and its downloaded file compare the same.

use rexvqa_engine::compare::{RunPredictions, compare as compare_runs, read_predictions};
use web_sys::File;

use super::error::WorkerError;
use super::runs;
use crate::io::read_blob;
use crate::protocol::{CompareSide, Event};

/// The comparison of `a` and `b`; `attached` holds the files of the sides that are files, A's
/// first.
pub async fn compare(
    a: CompareSide,
    b: CompareSide,
    attached: Vec<File>,
) -> Result<Event, WorkerError> {
    let mut files = attached.into_iter();
    let a = side(a, &mut files).await?;
    let b = side(b, &mut files).await?;
    let c = compare_runs(&a, &b).map_err(|e| e.to_string())?;
    Ok(Event::Comparison {
        exports: c.exports().into(),
        comparison: Box::new(c),
    })
}

async fn side(
    s: CompareSide,
    files: &mut impl Iterator<Item = File>,
) -> Result<RunPredictions, WorkerError> {
    match s {
        CompareSide::File { name } => {
            let f = files.next().ok_or_else(|| {
                format!("{name}: pick the file again (it did not reach the worker)")
            })?;
            let text = String::from_utf8(read_blob(&f).await?)
                .map_err(|_| format!("{name}: not UTF-8 text"))?;
            Ok(read_predictions(&name, &text, None)?)
        }
        CompareSide::Run { run_id } => runs::predictions(&run_id).await,
    }
}
