//! A run's journal: one [`Answer`] JSON per line, appended as answers come and never rewritten,
//! and what a resume reads back from it. The same bytes in the browser (OPFS) and in
//! `rexvqa eval` (a `.journal.jsonl` beside the output), so a run resumes the same way in both.

use super::Answer;

/// Parses a journal (one [`Answer`] JSON per line). A torn last line (a crash mid-write) is
/// ignored; later duplicates of an id are ignored so nothing counts twice.
pub fn read_journal(text: &str) -> Vec<Answer> {
    let mut seen = std::collections::HashSet::new();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Answer>(l).ok())
        .filter(|a| seen.insert(a.id.clone()))
        .collect()
}

/// Bytes of a journal up to and including its last newline: its complete lines. A resume cuts
/// the file there before appending, so a line torn by a crash or a refused write cannot swallow
/// the next answer's line (the saved lines themselves are never rewritten).
pub fn complete_len(journal: &[u8]) -> usize {
    journal
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1)
}

/// One journal line (with its newline).
pub fn journal_line(a: &Answer) -> String {
    let mut s = serde_json::to_string(a).expect("answers serialise");
    s.push('\n');
    s
}

/// The journal lines of `answers`, as one append.
pub fn journal_lines(answers: &[Answer]) -> String {
    answers.iter().map(journal_line).collect()
}

/// Where a resumed run starts: the answers its journal holds, and how many of the journal's
/// bytes to keep before appending (its complete lines; see [`complete_len`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// The answers saved so far, each id once.
    pub done: Vec<Answer>,
    /// The length to cut the journal file to.
    pub keep: usize,
}

impl Resume {
    /// Reads a journal's bytes (none for a new run). Bytes, not text: a line torn inside a
    /// character must not make the whole journal unreadable.
    pub fn from_bytes(saved: &[u8]) -> Resume {
        Resume {
            done: read_journal(&String::from_utf8_lossy(saved)),
            keep: complete_len(saved),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_tail_is_cut_and_complete_lines_kept() {
        let a = journal_line(&Answer {
            id: "q1".into(),
            prediction: None,
            robust: None,
            response: "B — é".into(),
            probs: None,
            missing_images: Vec::new(),
            unanswerable: None,
            ms: 1.0,
            ..Answer::default()
        });
        let mut bytes = a.as_bytes().to_vec();
        assert_eq!(complete_len(&bytes), bytes.len());
        // A second line torn inside a two-byte character.
        let torn = a.replace("q1", "q2");
        let cut = torn.find('é').unwrap() + 1;
        bytes.extend_from_slice(&torn.as_bytes()[..cut]);
        assert_eq!(complete_len(&bytes), a.len());
        assert_eq!(complete_len(b"{\"id\""), 0);
        let resume = Resume::from_bytes(&bytes);
        assert_eq!(resume.keep, a.len());
        assert_eq!(resume.done.len(), 1);
        assert_eq!(resume.done[0].id, "q1");
        assert_eq!(
            Resume::from_bytes(b""),
            Resume {
                done: Vec::new(),
                keep: 0
            }
        );
    }
}
