use super::prompt::*;
use super::synth::*;
use super::*;

const SAMPLE: &str = r#"{
 "q1": {"question": "Is there a pneumothorax?", "options": ["A. Yes", "B. No", "C. Maybe", "D. Unclear"],
        "correct_answer": "B", "task_name": "Presence Assessment", "category": "Pleura", "study_id": "s1",
        "ImagePath": ["../deid_png/p/a/studies/1/series/2/instances/3.png", "../deid_png/p/a/studies/1/series/2/instances/4.png"],
        "ImageViewPosition": ["PA", "LATERAL"], "NewField": {"x": [1, 2]}, "PatientAge": "058Y"},
 "q2": {"question": "Where?", "options": ["A) left", "B) right", "C) both", "D) neither"], "correct_answer": "c",
        "task_name": "Brand New Task", "study_id": "s1", "ImagePath": "../deid_png/p/a/studies/1/series/2/instances/3.png"},
 "q3": {"options": ["A. x", "B. y"]},
 "q4": "not an object",
 "q5": {"question": "Size?", "options": ["A. 1", "B. 2", "C. 3", "D. 4"], "correct_answer": "E", "study_id": "s2"},
 "q6": {"question": "Size?", "options": ["A. 1", "B. 2", "C. 3", "D. 4"], "study_id": 42,
        "task_name": "Geometric Information Assessment", "category": "Mediastinum"}
}"#;

#[test]
fn records_are_tolerant_and_bad_ones_are_reported() {
    let s = Split::from_json(SAMPLE).unwrap();
    let ids: Vec<&str> = s.records.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["q1", "q2", "q6"]);
    let rejected: Vec<(&str, &str)> = s
        .rejected
        .iter()
        .map(|r| (r.id.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(rejected[0], ("q3", "no question text"));
    assert_eq!(rejected[1].0, "q4");
    assert!(
        rejected[2].1.contains("\"E\" is not a letter"),
        "{rejected:?}"
    );

    let q2 = s.get("q2").unwrap();
    assert_eq!(q2.task, Task::Other("Brand New Task".into()));
    assert_eq!(q2.correct, Some(Letter::C));
    assert_eq!(q2.image_paths.len(), 1);
    let q6 = s.get("q6").unwrap();
    assert_eq!((q6.study_id.as_str(), q6.correct), ("42", None));
}

#[test]
fn leaderboard_output_keeps_every_input_field() {
    let s = Split::from_json(SAMPLE).unwrap();
    let out = s
        .get("q1")
        .unwrap()
        .leaderboard_json(Some(Letter::B), "B. No");
    assert_eq!(out["NewField"]["x"][1], 2);
    assert_eq!(out["PatientAge"], "058Y");
    assert_eq!(out["model_prediction"], "B");
    assert_eq!(out["model_response"], "B. No");
    let keys: Vec<&String> = out.keys().collect();
    assert_eq!(
        keys.first().unwrap().as_str(),
        "question",
        "input order is kept"
    );
    let none = s.get("q1").unwrap().leaderboard_json(None, "unsure");
    assert_eq!(none["model_prediction"], "");
}

#[test]
fn image_paths_resolve_under_the_root_and_never_escape_it() {
    assert_eq!(
        resolve_image_path("../deid_png/p/a/x.png").as_deref(),
        Some("deid_png/p/a/x.png")
    );
    assert_eq!(
        resolve_image_path("/home/u/data/deid_png/p/x.png").as_deref(),
        Some("deid_png/p/x.png")
    );
    assert_eq!(resolve_image_path("deid_png/../../etc/passwd"), None);
    assert_eq!(resolve_image_path(""), None);
    assert_eq!(resolve_image_path("a//b.png"), None);
}

#[test]
fn summary_counts_tasks_categories_views_and_studies() {
    let s = Split::from_json(SAMPLE).unwrap().summary();
    assert_eq!((s.questions, s.rejected, s.studies, s.images), (3, 3, 2, 2));
    assert_eq!(s.per_task["Presence Assessment"], 1);
    assert_eq!(s.per_task["Brand New Task"], 1);
    assert_eq!(s.per_view["PA"], 1);
    assert_eq!(s.per_view["LATERAL"], 1);
    assert_eq!(s.per_category[""], 1);
}

fn synthetic_split(studies: usize, seed: u64) -> Split {
    let mut json = None;
    let opts = SynthOptions {
        studies,
        questions_per_study: 4,
        seed,
        size_range: (32, 40),
        split: "test".into(),
    };
    generate(&opts, |f| {
        if f.path.ends_with(".json") {
            json = Some(String::from_utf8(f.bytes).unwrap());
        }
    });
    Split::from_json(&json.unwrap()).unwrap()
}

#[test]
fn stratified_subsets_are_seeded_and_balanced() {
    let s = synthetic_split(30, 5);
    let a = s
        .select(&Scope::Stratified {
            per_task: 3,
            seed: 9,
        })
        .unwrap();
    let b = s
        .select(&Scope::Stratified {
            per_task: 3,
            seed: 9,
        })
        .unwrap();
    let c = s
        .select(&Scope::Stratified {
            per_task: 3,
            seed: 10,
        })
        .unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.len(), 15);
    let mut per_task = std::collections::BTreeMap::new();
    for &i in &a {
        *per_task.entry(s.records[i].task.name()).or_insert(0) += 1;
    }
    assert!(per_task.values().all(|&n| n == 3), "{per_task:?}");
    assert_eq!(s.select(&Scope::First(7)).unwrap().len(), 7);
}

#[test]
fn shards_partition_the_split_by_whole_studies() {
    let s = synthetic_split(23, 6);
    let n = 4;
    let shards: Vec<Vec<usize>> = (1..=n)
        .map(|k| s.select(&Scope::Shard { k, n }).unwrap())
        .collect();
    let mut all: Vec<usize> = shards.concat();
    all.sort();
    assert_eq!(
        all,
        (0..s.records.len()).collect::<Vec<_>>(),
        "disjoint and complete"
    );
    for (k, shard) in shards.iter().enumerate() {
        assert!(!shard.is_empty(), "shard {k} is empty");
        for other in shards.iter().skip(k + 1) {
            let studies: std::collections::BTreeSet<&str> =
                shard.iter().map(|&i| s.records[i].study_key()).collect();
            assert!(
                other
                    .iter()
                    .all(|&i| !studies.contains(s.records[i].study_key()))
            );
        }
    }
    assert_eq!(Scope::parse_shard("2/8"), Ok(Scope::Shard { k: 2, n: 8 }));
    assert_eq!(
        Scope::parse_shard("9/8"),
        Err(ScopeError::BadShard { k: 9, n: 8 })
    );
    assert!(s.select(&Scope::Shard { k: 0, n: 2 }).is_err());
}

#[test]
fn user_text_and_chat_are_the_official_strings() {
    let opts: Vec<String> = ["A. Yes", "B. No", "C. Maybe", "D. Unclear"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        user_text("Is it?", &opts, None),
        "Question: Is it?\n\nOptions:\nA. Yes\nB. No\nC. Maybe\nD. Unclear\n\nAnswer:"
    );
    assert_eq!(
        user_text("Is it?", &opts[..2], Some("age 58")),
        "Question: Is it?\n\nContext: age 58\n\nOptions:\nA. Yes\nB. No\n\nAnswer:"
    );
    assert_eq!(
        chat(Some("SYS"), "  hi \n", 1),
        "<bos><start_of_turn>user\nSYS\n\nhi<start_of_image><end_of_turn>\n<start_of_turn>model\n"
    );
    let e = expand_images("a<start_of_image>b");
    assert!(e.starts_with("a\n\n<start_of_image><image_soft_token>"));
    assert!(e.ends_with("<image_soft_token><end_of_image>\n\nb"));
    assert_eq!(e.matches("<image_soft_token>").count(), 256);
}

#[test]
fn synthetic_split_is_deterministic_and_in_the_real_layout() {
    let mut files = Vec::new();
    let opts = SynthOptions {
        studies: 3,
        size_range: (40, 48),
        ..Default::default()
    };
    generate(&opts, |f| files.push((f.path, f.bytes)));
    let mut again = Vec::new();
    generate(&opts, |f| again.push((f.path, f.bytes)));
    assert_eq!(files, again);
    let (json_path, json) = files.last().unwrap();
    assert_eq!(json_path, "metadata/test_vqa_data.json");
    let split = Split::from_json(std::str::from_utf8(json).unwrap()).unwrap();
    assert_eq!((split.records.len(), split.rejected.len()), (12, 0));
    let pngs: Vec<&String> = files
        .iter()
        .map(|f| &f.0)
        .filter(|p| p.ends_with(".png"))
        .collect();
    assert_eq!(split.image_paths().iter().collect::<Vec<_>>(), pngs);
    for p in &pngs {
        let parts: Vec<&str> = p.split('/').collect();
        assert_eq!(
            (parts[0], parts[3], parts[5], parts[7]),
            ("deid_png", "studies", "series", "instances")
        );
    }
    for r in &split.records {
        assert!(r.correct.is_some() && r.options.len() == 4);
        assert_eq!(r.image_paths.len(), r.view_positions.len());
        let letter = r.correct.unwrap();
        assert!(r.options[letter.index()].starts_with(&format!("{letter}. ")));
    }
}
