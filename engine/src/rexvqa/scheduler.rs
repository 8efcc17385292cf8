//! `--shard auto`: a job's shard k/n from the scheduler that started it, a Slurm job array or a
//! Kubernetes Indexed Job. The variables come through a lookup, so the engine reads no
//! environment itself and the rules are testable.

use super::Scope;

/// Why no shard could be read from the scheduler.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchedulerError {
    /// Neither a Slurm array task nor an Indexed Job's pod.
    #[error(
        "--shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) is set; give the shard as k/n"
    )]
    NoScheduler,
    /// An Indexed Job does not tell its pods the count.
    #[error(
        "--shard auto: JOB_COMPLETION_INDEX is set but an Indexed Job does not tell the count: use --shard auto/N with N = the Job's completions"
    )]
    NoCount,
    /// A variable that is not a number.
    #[error("--shard auto: {var}={value:?} is not a whole number")]
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// An array whose task ids are not one contiguous range.
    #[error(
        "--shard auto: the Slurm array {min}-{max} (step {step}, {count} tasks) is not one contiguous range; submit it as --array=0-{last} or 1-{count}",
        last = count.saturating_sub(1)
    )]
    Gaps {
        /// SLURM_ARRAY_TASK_MIN.
        min: usize,
        /// SLURM_ARRAY_TASK_MAX.
        max: usize,
        /// SLURM_ARRAY_TASK_STEP.
        step: usize,
        /// SLURM_ARRAY_TASK_COUNT.
        count: usize,
    },
    /// A count given that the scheduler contradicts.
    #[error("--shard auto/{given}: the scheduler runs {actual} tasks")]
    CountMismatch {
        /// The N of auto/N.
        given: usize,
        /// The scheduler's count.
        actual: usize,
    },
    /// An index past the count.
    #[error("--shard auto/{n}: JOB_COMPLETION_INDEX={index} is not below {n}")]
    IndexPastCount {
        /// The pod's index.
        index: usize,
        /// The count given.
        n: usize,
    },
    /// Text that is neither `auto` nor `auto/N`.
    #[error("cannot read {0:?} as a shard (expected k/n, auto or auto/N)")]
    Parse(String),
}

/// Whether `spec` asks for the scheduler's shard (`auto` or `auto/N`).
pub fn is_auto(spec: &str) -> bool {
    spec.trim() == "auto" || spec.trim().starts_with("auto/")
}

/// The shard of `auto` or `auto/N`: a Slurm array task's (its id's place in the array, of
/// `SLURM_ARRAY_TASK_COUNT`), else an Indexed Job pod's (`JOB_COMPLETION_INDEX` + 1, of N).
pub fn shard_from_scheduler(
    spec: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Scope, SchedulerError> {
    let given = match spec.trim().strip_prefix("auto") {
        Some("") => None,
        Some(rest) => Some(
            rest.strip_prefix('/')
                .and_then(|n| n.trim().parse::<usize>().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| SchedulerError::Parse(spec.to_string()))?,
        ),
        None => return Err(SchedulerError::Parse(spec.to_string())),
    };
    let num = |var: &'static str| -> Result<Option<usize>, SchedulerError> {
        env(var)
            .map(|value| {
                value
                    .trim()
                    .parse()
                    .map_err(|_| SchedulerError::NotANumber { var, value })
            })
            .transpose()
    };
    if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
        let count = num("SLURM_ARRAY_TASK_COUNT")?.unwrap_or(1);
        let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(id);
        let max = num("SLURM_ARRAY_TASK_MAX")?.unwrap_or(min + count - 1);
        let step = num("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1);
        if step != 1 || max + 1 != min + count || id < min || id > max {
            return Err(SchedulerError::Gaps {
                min,
                max,
                step,
                count,
            });
        }
        if let Some(given) = given.filter(|&g| g != count) {
            return Err(SchedulerError::CountMismatch {
                given,
                actual: count,
            });
        }
        return Ok(Scope::Shard {
            k: id - min + 1,
            n: count,
        });
    }
    if let Some(index) = num("JOB_COMPLETION_INDEX")? {
        let n = given.ok_or(SchedulerError::NoCount)?;
        if index >= n {
            return Err(SchedulerError::IndexPastCount { index, n });
        }
        return Ok(Scope::Shard { k: index + 1, n });
    }
    Err(SchedulerError::NoScheduler)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_slurm_array_gives_each_task_its_place() {
        // --array=0-3 and --array=1-4 both make shards 1..4 of 4.
        for (min, max) in [("0", "3"), ("1", "4")] {
            let ids: Vec<Scope> = (min.parse::<usize>().unwrap()..=max.parse().unwrap())
                .map(|id| {
                    let id = id.to_string();
                    let vars = [
                        ("SLURM_ARRAY_TASK_ID", id.as_str()),
                        ("SLURM_ARRAY_TASK_COUNT", "4"),
                        ("SLURM_ARRAY_TASK_MIN", min),
                        ("SLURM_ARRAY_TASK_MAX", max),
                        ("SLURM_ARRAY_TASK_STEP", "1"),
                    ];
                    shard_from_scheduler("auto", env(&vars)).unwrap()
                })
                .collect();
            let want: Vec<Scope> = (1..=4).map(|k| Scope::Shard { k, n: 4 }).collect();
            assert_eq!(ids, want);
        }
        let vars = [
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "2"),
        ];
        assert_eq!(
            shard_from_scheduler("auto/3", env(&vars)),
            Ok(Scope::Shard { k: 3, n: 3 })
        );
        assert_eq!(
            shard_from_scheduler("auto/4", env(&vars)),
            Err(SchedulerError::CountMismatch {
                given: 4,
                actual: 3
            })
        );
    }

    #[test]
    fn an_array_with_gaps_is_refused() {
        // --array=1-7:2: tasks 1, 3, 5, 7 (count 4) cannot be numbered 1..4 by id.
        let vars = [
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_MAX", "7"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ];
        let e = shard_from_scheduler("auto", env(&vars)).unwrap_err();
        assert!(matches!(e, SchedulerError::Gaps { step: 2, .. }), "{e}");
        assert!(e.to_string().contains("--array=0-3 or 1-4"), "{e}");
    }

    #[test]
    fn an_indexed_job_needs_its_count() {
        let vars = [("JOB_COMPLETION_INDEX", "0")];
        assert_eq!(
            shard_from_scheduler("auto/5", env(&vars)),
            Ok(Scope::Shard { k: 1, n: 5 })
        );
        assert_eq!(
            shard_from_scheduler("auto", env(&vars)),
            Err(SchedulerError::NoCount)
        );
        let vars = [("JOB_COMPLETION_INDEX", "5")];
        assert_eq!(
            shard_from_scheduler("auto/5", env(&vars)),
            Err(SchedulerError::IndexPastCount { index: 5, n: 5 })
        );
    }

    #[test]
    fn without_a_scheduler_or_with_nonsense_it_refuses() {
        assert_eq!(
            shard_from_scheduler("auto", env(&[])),
            Err(SchedulerError::NoScheduler)
        );
        let vars = [("SLURM_ARRAY_TASK_ID", "two")];
        assert_eq!(
            shard_from_scheduler("auto", env(&vars)),
            Err(SchedulerError::NotANumber {
                var: "SLURM_ARRAY_TASK_ID",
                value: "two".into()
            })
        );
        for bad in ["auto/0", "auto/x", "autox", "2/4"] {
            assert_eq!(
                shard_from_scheduler(bad, env(&[("JOB_COMPLETION_INDEX", "0")])),
                Err(SchedulerError::Parse(bad.into())),
                "{bad}"
            );
        }
        assert!(is_auto("auto") && is_auto("auto/3") && !is_auto("1/3"));
    }
}
