//! Nothing hidden in a score: a split with malformed records and questions whose images cannot be
//! used, evaluated through the CLI. The report names the 2 rejected records and the 3
//! unanswerable questions, leaves the latter out of accuracy by default (or answers them text only
//! when asked to), and shard files keep them.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use rexvqa_engine::rexvqa::Split;
use rexvqa_engine::score;

fn rexvqa(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rexvqa"))
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "rexvqa {args:?}: {stderr}");
    (stdout, stderr)
}

/// A synthetic split of 20 questions (5 studies × 4) with 2 records the parser must reject and 3
/// questions none of whose images can be used; returns the split path and the ids.
fn malformed_split(dir: &Path) -> (PathBuf, [String; 2], [String; 3]) {
    let d = dir.to_str().unwrap();
    rexvqa(&[
        "synth",
        "--out",
        d,
        "--studies",
        "5",
        "--questions-per-study",
        "4",
        "--min-size",
        "64",
        "--max-size",
        "96",
        "--seed",
        "5",
    ]);
    let path = dir.join("metadata/test_vqa_data.json");
    let mut json: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let ids: Vec<String> = json.keys().cloned().collect();
    assert_eq!(ids.len(), 20);
    let rec = |json: &mut serde_json::Map<String, serde_json::Value>, i: usize| {
        json.get_mut(&ids[i])
            .unwrap()
            .as_object_mut()
            .unwrap()
            .clone()
    };
    let mut set = |i: usize, f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut r = rec(&mut json, i);
        f(&mut r);
        json.insert(ids[i].clone(), r.into());
    };
    set(1, &|r| {
        r.remove("options");
    });
    set(6, &|r| {
        r.insert("correct_answer".into(), "E".into());
    });
    set(9, &|r| {
        r.insert("ImagePath".into(), serde_json::json!([]));
    });
    set(13, &|r| {
        r.insert(
            "ImagePath".into(),
            serde_json::json!(["../deid_png/../../../../etc/passwd"]),
        );
    });
    set(17, &|r| {
        r.insert(
            "ImagePath".into(),
            serde_json::json!(["../deid_png/nowhere/missing.png"]),
        );
    });
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    (
        path,
        [ids[1].clone(), ids[6].clone()],
        [ids[9].clone(), ids[13].clone(), ids[17].clone()],
    )
}

fn ids_of(v: &serde_json::Value) -> Vec<String> {
    let mut ids: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn rejected_records_and_unanswerable_questions_are_named_and_left_out() {
    let dir = std::env::temp_dir().join(format!("rexvqa-accounting-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (split_path, rejected, mut unanswerable) = malformed_split(&dir);
    unanswerable.sort();
    let (model, mmproj) = common::tiny_pair(&common::golden_json_gz("tiny_tiny-q8_0.json.gz"));
    let eval = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            model.to_str().unwrap(),
            "--mmproj",
            mmproj.to_str().unwrap(),
            "--split",
            split_path.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (_, stderr) = rexvqa(&args);
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.with_extension("json.report.json")).unwrap(),
        )
        .unwrap();
        (stderr, report)
    };

    // Default: the 3 are not asked and count in no accuracy.
    let pred = dir.join("pred.json");
    let (stderr, r) = eval(&pred, &[]);
    assert!(
        stderr.contains(
            "answered 15 of 18; 2 record(s) rejected by the split parser, 3 question(s) unanswerable (no usable image; left out of accuracy)"
        ),
        "{stderr}"
    );
    assert_eq!(r["answered"], 15);
    assert_eq!(r["in_scope"], 18);
    assert_eq!(r["official"]["overall"]["n"], 15);
    let mut want_rejected = rejected.to_vec();
    want_rejected.sort();
    assert_eq!(ids_of(&r["rejected_records"]), want_rejected);
    assert_eq!(ids_of(&r["unanswerable"]), unanswerable.to_vec());
    let reasons: Vec<&str> = r["unanswerable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["reason"].as_str().unwrap())
        .collect();
    for needle in ["lists no image", "refused", "missing.png"] {
        assert!(
            reasons.iter().any(|r| r.contains(needle)),
            "{needle}: {reasons:?}"
        );
    }
    let md = std::fs::read_to_string(pred.with_extension("json.report.md")).unwrap();
    assert!(
        md.contains("| records rejected by the split parser | 2 |"),
        "{md}"
    );
    assert!(md.contains("## Unanswerable questions"), "{md}");
    for id in rejected.iter().chain(&unanswerable) {
        assert!(md.contains(id.as_str()), "{id} not in the Markdown");
    }

    // The leaderboard file keeps them marked, and a merge of shards still names them.
    let split = Split::from_json(&std::fs::read_to_string(&split_path).unwrap()).unwrap();
    let preds: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&pred).unwrap()).unwrap();
    let (a, b): (Vec<_>, Vec<_>) = preds.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let shard = |v: Vec<(usize, (String, serde_json::Value))>| {
        serde_json::to_string(
            &v.into_iter()
                .map(|(_, kv)| kv)
                .collect::<serde_json::Map<_, _>>(),
        )
        .unwrap()
    };
    let merged =
        score::merge_shards(&split, &[("a".into(), shard(a)), ("b".into(), shard(b))]).unwrap();
    let mut merged_ids: Vec<String> = merged.unanswerable.iter().map(|x| x.id.clone()).collect();
    merged_ids.sort();
    assert_eq!(merged_ids, unanswerable.to_vec());
    assert_eq!(
        score::predictions_from_leaderboard(&split, &merged.predictions).len(),
        15
    );

    // With the setting, the same 3 are answered text only and counted as answered without image.
    let (stderr, r) = eval(
        &dir.join("pred-text-only.json"),
        &["--answer-without-image"],
    );
    assert!(
        stderr.contains("answered 18 of 18; 2 record(s) rejected by the split parser, 0 question(s) unanswerable (no usable image; answered text only by setting)"),
        "{stderr}"
    );
    assert_eq!(r["official"]["overall"]["n"], 18);
    assert_eq!(r["missing_images"], 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
