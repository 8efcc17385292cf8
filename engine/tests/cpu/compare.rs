//! Comparing two runs against tests/reference/compare_golden.py (statsmodels: exact McNemar and
//! Cohen's kappa; the Agresti–Min interval with scipy's z), on the seeded prediction files it wrote.

use rexvqa_engine::compare::{Comparison, compare, read_predictions};
use serde_json::Value;

const A: &str = include_str!("../../../tests/fixtures/compare/a.json");
const B: &str = include_str!("../../../tests/fixtures/compare/b.json");
const GOLDEN: &str = include_str!("../../../tests/reference/golden/compare.json");

fn comparison() -> Comparison {
    let a = read_predictions("a.json", A, None).unwrap();
    let b = read_predictions("b.json", B, None).unwrap();
    compare(&a, &b).unwrap()
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Largest gap from the reference, measured relative to max(|value|, 1e-3): 6.1e-15 (a p-value;
/// 2.2e-16 absolute over every figure). The bound is 16× that.
const TOL: f64 = 1e-13;

fn close(ours: f64, theirs: f64, what: &str) {
    let gap = (ours - theirs).abs() / theirs.abs().max(1e-3);
    assert!(gap < TOL, "{what}: ours {ours}, statsmodels {theirs}");
}

#[test]
fn comparison_matches_statsmodels() {
    let c = comparison();
    let g: Value = serde_json::from_str(GOLDEN).unwrap();
    assert_eq!(c.shared, g["shared"].as_u64().unwrap() as usize);
    assert_eq!(c.only_a, ids(&g["only_a"]));
    assert_eq!(c.only_b, ids(&g["only_b"]));
    assert_eq!(c.unanswerable_a, ids(&g["unanswerable_a"]));
    assert_eq!(c.unanswerable_b, ids(&g["unanswerable_b"]));
    assert_eq!(c.unlabelled, g["unlabelled"].as_u64().unwrap() as usize);
    assert_eq!(
        [c.failed.0, c.failed.1],
        [
            g["failed"][0].as_u64().unwrap() as usize,
            g["failed"][1].as_u64().unwrap() as usize
        ]
    );
    assert_eq!(
        c.disagreements
            .iter()
            .map(|d| d.id.clone())
            .collect::<Vec<_>>(),
        ids(&g["disagreements"])
    );
    close(c.agreement, g["agreement"].as_f64().unwrap(), "agreement");
    close(c.kappa.unwrap(), g["kappa"].as_f64().unwrap(), "kappa");
    let groups = g["groups"].as_object().unwrap();
    assert_eq!(c.rows().count(), groups.len());
    for (name, p) in c.rows() {
        let e = &groups[name];
        let n = |k: &str| e[k].as_u64().unwrap() as usize;
        assert_eq!(
            (p.n, p.both, p.a_only, p.b_only),
            (n("n"), n("both"), n("a_only"), n("b_only")),
            "{name}"
        );
        for (ours, key) in [
            (p.accuracy_a, "accuracy_a"),
            (p.accuracy_b, "accuracy_b"),
            (p.difference, "difference"),
            (p.ci_low, "ci_low"),
            (p.ci_high, "ci_high"),
            (p.mcnemar_p, "mcnemar_p"),
        ] {
            close(ours, e[key].as_f64().unwrap(), &format!("{name} {key}"));
        }
    }
}

#[test]
fn exports_carry_every_group() {
    let c = comparison();
    let md = c.markdown();
    let csv = c.csv();
    for (name, _) in c.rows() {
        assert!(md.contains(&format!("| {name} |")), "{name} in markdown");
        assert!(csv.contains(&format!("\"{name}\",")), "{name} in csv");
    }
    assert_eq!(csv.lines().count(), 1 + c.rows().count());
    assert!(md.contains(&format!(
        "## Answered differently ({})",
        c.disagreements.len()
    )));
    // The JSON export reads back (serde_json's default float parsing may move a last bit,
    // which is why the worker, not the page, writes the exports).
    let back: Comparison = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(
        (&back.disagreements, &back.only_a, back.shared),
        (&c.disagreements, &c.only_a, c.shared)
    );
    for ((_, p), (_, q)) in back.rows().zip(c.rows()) {
        assert_eq!(
            (p.n, p.both, p.a_only, p.b_only),
            (q.n, q.both, q.a_only, q.b_only)
        );
        assert!((p.ci_low - q.ci_low).abs() < 1e-15 && (p.mcnemar_p - q.mcnemar_p).abs() < 1e-15);
    }
}

#[test]
fn bad_and_disjoint_files_say_what_is_wrong() {
    let e = read_predictions("x.json", "[1, 2]", None).unwrap_err();
    assert!(
        e.to_string().starts_with("x.json: not a predictions file"),
        "{e}"
    );
    let no_pred = r#"{"q1": {"question": "Q?", "options": ["A. a", "B. b"]}}"#;
    let e = read_predictions("y.json", no_pred, None).unwrap_err();
    assert!(e.to_string().contains("q1 has no model_prediction"), "{e}");
    let one = |id: &str| {
        format!(
            r#"{{"{id}": {{"question": "Q?", "options": ["A. a", "B. b"], "model_prediction": "A"}}}}"#
        )
    };
    let a = read_predictions("a.json", &one("q1"), None).unwrap();
    let b = read_predictions("b.json", &one("q2"), None).unwrap();
    let e = compare(&a, &b).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a.json and b.json share no question: compare runs on the same split"
    );
}
