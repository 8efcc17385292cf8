//! Room checks before copying into bounded storage (a browser origin's quota): a copy that cannot
//! fit is refused before its first byte, with the numbers a user needs to make room.

/// Bytes in decimal units, as storage quotas and file managers show them ("3.3 GB").
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A copy of `need` more bytes refused for want of room under the quota.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "not enough browser storage for {what}: it needs {} more, and this site may use {} of which {} \
     is taken ({} free). Delete stored models or runs on this page, or free disk space, then try \
     again: the copy resumes where it stopped.",
    human_bytes(*need as f64),
    human_bytes(*quota as f64),
    human_bytes(*usage as f64),
    human_bytes(quota.saturating_sub(*usage) as f64)
)]
pub struct NoRoom {
    /// What was to be copied, in words.
    pub what: String,
    /// Bytes still to write.
    pub need: u64,
    /// Bytes the origin uses now.
    pub usage: u64,
    /// Bytes the origin may use.
    pub quota: u64,
}

/// A copy the browser stopped with a full-storage error part-way (its estimate of the quota can
/// be generous, and the disk can fill while a copy runs).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "not enough browser storage for {what}: the browser refused a write after {} of {} \
     ({} still to copy; it reports {} used of {}). Delete stored models or runs on this page, or \
     free disk space, then try again: the copy resumes where it stopped.",
    human_bytes(*done as f64),
    human_bytes(*total as f64),
    human_bytes(total.saturating_sub(*done) as f64),
    human_bytes(*usage as f64),
    human_bytes(*quota as f64)
)]
pub struct WriteRefused {
    /// What was being copied, in words.
    pub what: String,
    /// Bytes copied before the refusal (kept: the next copy resumes from there).
    pub done: u64,
    /// Bytes of the whole copy.
    pub total: u64,
    /// Bytes the origin uses, as the browser reports.
    pub usage: u64,
    /// The origin's quota, as the browser reports.
    pub quota: u64,
}

/// Checks that `need` more bytes fit under `quota` with `usage` taken.
pub fn check_room(what: &str, need: u64, usage: u64, quota: u64) -> Result<(), NoRoom> {
    if usage.saturating_add(need) <= quota {
        return Ok(());
    }
    Err(NoRoom {
        what: what.to_string(),
        need,
        usage,
        quota,
    })
}

/// A name safe in any storage (OPFS, a download): ASCII letters, digits, `.`, `_` and `-`;
/// anything else becomes `_`. An empty name becomes `fallback`.
pub fn safe_name(name: &str, fallback: &str) -> String {
    let n: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if n.is_empty() { fallback.into() } else { n }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_names_keep_ascii_words_and_replace_the_rest() {
        assert_eq!(safe_name("medgemma-4b_Q4.gguf", "x"), "medgemma-4b_Q4.gguf");
        assert_eq!(safe_name("Dr Ö/../x?.gguf", "x"), "Dr___.._x_.gguf");
        assert_eq!(safe_name("", "model.gguf"), "model.gguf");
    }

    #[test]
    fn a_copy_that_fits_passes_and_one_that_does_not_names_the_numbers() {
        assert!(check_room("x", 100, 900, 1000).is_ok());
        let e = check_room(
            "the model files",
            3_340_000_000,
            1_000_000_000,
            4_000_000_000,
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("needs 3.3 GB more"), "{msg}");
        assert!(
            msg.contains("may use 4.0 GB of which 1.0 GB is taken (3.0 GB free)"),
            "{msg}"
        );
        // Usage above the quota (possible after a quota shrinks) reports no free room, not a wrap.
        let e = check_room("y", 1, 5, 4).unwrap_err();
        assert!(e.to_string().contains("(0 B free)"), "{e}");
    }

    #[test]
    fn a_refused_write_says_how_far_the_copy_got() {
        let e = WriteRefused {
            what: "model.gguf".into(),
            done: 8_388_608,
            total: 24_724_768,
            usage: 8_400_000,
            quota: 10_000_000,
        };
        assert_eq!(
            e.to_string(),
            "not enough browser storage for model.gguf: the browser refused a write after 8.4 MB of \
             24.7 MB (16.3 MB still to copy; it reports 8.4 MB used of 10.0 MB). Delete stored \
             models or runs on this page, or free disk space, then try again: the copy resumes \
             where it stopped."
        );
    }

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(human_bytes(999.0), "999 B");
        assert_eq!(human_bytes(2_490_000_000.0), "2.5 GB");
    }
}
