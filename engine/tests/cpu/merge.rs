//! `rexvqa eval --shard auto` in a Slurm array's environment, then `rexvqa merge`: the merged
//! files equal an unsharded run's, and a missing shard is refused.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

fn rexvqa(args: &[&str], envs: &[(&str, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rexvqa"))
        .args(args)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .envs(envs.iter().map(|(k, v)| (k, v.as_str())))
        .output()
        .unwrap()
}

fn ok(out: Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what}: {stderr}");
    stderr
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&read(p)).unwrap()
}

/// The CSV without its last column (the time of each question).
fn csv_without_ms(p: &Path) -> Vec<String> {
    read(p)
        .lines()
        .map(|l| l.rsplit_once(',').unwrap().0.to_string())
        .collect()
}

#[test]
fn slurm_array_shards_merge_into_the_unsharded_run() {
    let dir = std::env::temp_dir().join(format!("rexvqa-merge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("rexvqa");
    let d = data.to_str().unwrap();
    ok(
        rexvqa(
            &[
                "synth",
                "--out",
                d,
                "--studies",
                "4",
                "--questions-per-study",
                "2",
                "--min-size",
                "64",
                "--max-size",
                "96",
                "--seed",
                "7",
            ],
            &[],
        ),
        "synth",
    );
    let split = data.join("metadata/test_vqa_data.json");
    let (model, _) = common::tiny_pair(&common::golden_json_gz("tiny_tiny-q8_0.json.gz"));
    let mmproj = common::tiny_mmproj_224();
    let eval = |out: &Path, shard: Option<&str>, envs: &[(&str, String)]| {
        let mut args = vec![
            "eval",
            "--model",
            model.to_str().unwrap(),
            "--mmproj",
            mmproj.to_str().unwrap(),
            "--split",
            split.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        if let Some(s) = shard {
            args.extend(["--shard", s]);
        }
        rexvqa(&args, envs)
    };
    let whole = dir.join("whole.json");
    ok(eval(&whole, None, &[]), "unsharded eval");

    // An array submitted as --array=1-3: each task finds its shard in its environment.
    let mut shards = Vec::new();
    for id in 1..=3 {
        let out = dir.join(format!("shard{id}.json"));
        let envs = [
            ("SLURM_ARRAY_TASK_ID", id.to_string()),
            ("SLURM_ARRAY_TASK_COUNT", "3".into()),
            ("SLURM_ARRAY_TASK_MIN", "1".into()),
            ("SLURM_ARRAY_TASK_MAX", "3".into()),
        ];
        let stderr = ok(eval(&out, Some("auto"), &envs), "shard eval");
        assert!(
            stderr.contains(&format!("shard {id}/3 from the scheduler")),
            "{stderr}"
        );
        shards.push(out);
    }
    let no_scheduler = eval(&dir.join("x.json"), Some("auto"), &[]);
    assert!(!no_scheduler.status.success());
    assert!(
        String::from_utf8_lossy(&no_scheduler.stderr).contains("neither SLURM_ARRAY_TASK_ID"),
        "{no_scheduler:?}"
    );

    let merge = |out: &Path, shards: &[&Path]| {
        let mut args = vec!["merge"];
        args.extend(shards.iter().map(|p| p.to_str().unwrap()));
        args.extend([
            "--split",
            split.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        args.extend([
            "--model",
            model.to_str().unwrap(),
            "--mmproj",
            mmproj.to_str().unwrap(),
        ]);
        rexvqa(&args, &[])
    };
    let merged = dir.join("merged.json");
    let refs: Vec<&Path> = shards.iter().map(|p| p.as_path()).collect();
    ok(merge(&merged, &refs), "merge");
    assert_eq!(
        json(&merged),
        json(&whole),
        "predictions, question by question"
    );
    let (m, w) = (
        json(&dir.join("merged.json.report.json")),
        json(&dir.join("whole.json.report.json")),
    );
    for k in [
        "settings",
        "answered",
        "in_scope",
        "official",
        "robust",
        "unanswerable",
    ] {
        assert_eq!(m[k], w[k], "report.json {k}");
    }
    assert_eq!(
        csv_without_ms(&dir.join("merged.json.csv")),
        csv_without_ms(&dir.join("whole.json.csv"))
    );
    let md = read(&dir.join("merged.json.report.md"));
    assert!(md.contains("merged from 3 shards"), "{md}");

    let gap = merge(&dir.join("gap.json"), &refs[..2]);
    assert!(!gap.status.success());
    let stderr = String::from_utf8_lossy(&gap.stderr);
    assert!(stderr.contains("are in no shard file"), "{stderr}");
    assert!(
        !dir.join("gap.json").exists(),
        "a refused merge writes nothing"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
