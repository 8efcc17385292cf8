#!/usr/bin/env python3
"""Golden figures for comparing two runs (engine/src/compare.rs), computed with statsmodels.

Writes two leaderboard-format prediction files over a synthetic question set (seeded; B agrees
with A on most questions, some failed extractions, questions without ground truth, questions in
one file only, and questions one file marks unanswerable) to tests/fixtures/compare/, and the
figures to tests/reference/golden/compare.json:
- accuracy of each run, paired counts, B - A, per group (overall, each task);
- the exact McNemar p-value: statsmodels.stats.contingency_tables.mcnemar(exact=True);
- the 95 % interval of B - A by Agresti and Min (2005): Wald's with 1/2 added to each cell (z from
  scipy.stats.norm);
- agreement and Cohen's kappa over A-D plus "failed": statsmodels.stats.inter_rater.cohens_kappa.
Accuracy counts only shared questions with ground truth; a failed extraction is wrong.
Usage: pip install statsmodels; python tests/reference/compare_golden.py
"""
import json
from pathlib import Path

import numpy as np
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.inter_rater import cohens_kappa
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/compare"
GOLDEN = ROOT / "tests/reference/golden/compare.json"
TASKS = ["Presence Assessment", "Negation Assessment", "Differential Diagnosis",
         "Location and Distribution Assessment", "Geometric Information Assessment"]
LETTERS = "ABCD"


def record(i, task, truth):
    r = {
        "question": f"Question {i}: is there a finding?",
        "options": [f"{l}. option {l.lower()}" for l in LETTERS],
        "task_name": task,
        "category": ["Pleura", "Lung", "Heart"][i % 3],
        "study_id": f"study{i // 4:04d}",
        "image_path": [f"../deid_png/p/study{i // 4:04d}/a.png"],
    }
    if truth is not None:
        r["correct_answer"] = truth
    return r


def make_runs(rng):
    n = 480
    a, b = {}, {}
    for i in range(n):
        # The last task gets few questions, so its exact p-value rests on small counts.
        task = TASKS[int(rng.integers(0, 4))] if i % 11 else TASKS[4]
        truth = LETTERS[int(rng.integers(0, 4))] if i % 29 else None
        rec = record(i, task, truth)
        p_right_a = {TASKS[0]: 0.8, TASKS[1]: 0.7, TASKS[2]: 0.55, TASKS[3]: 0.5, TASKS[4]: 0.6}[task]
        pa = truth if truth and rng.random() < p_right_a else LETTERS[int(rng.integers(0, 4))]
        if rng.random() < 0.04:
            pa = ""  # a failed extraction
        # B keeps A's answer mostly (always on the last task: no discordant pair there);
        # otherwise it answers afresh, much better on Presence.
        keep = 0.5 if task == TASKS[0] else 0.85
        if rng.random() < keep or task == TASKS[4]:
            pb = pa
        else:
            better = 0.95 if task == TASKS[0] else 0.5
            pb = truth if truth and rng.random() < better else LETTERS[int(rng.integers(0, 4))]
            if rng.random() < 0.05:
                pb = ""
        qid = f"q{i:05d}"
        if i % 53 != 5:
            a[qid] = dict(rec, model_prediction=pa, model_response=f"{pa or 'unsure'}. reply")
        if i % 61 != 7:
            b[qid] = dict(rec, model_prediction=pb, model_response=f"{pb or 'unsure'}. reply")
        if i % 97 == 3 and qid in a:
            a[qid]["unanswerable"] = "no usable image: ../deid_png/p/x.png is empty"
    return a, b


def agresti_min(both, a_only, b_only, neither):
    """Agresti & Min (2005, Stat Med 24:729): Wald's interval for the paired difference with
    1/2 added to each cell of the 2x2 table."""
    n = both + a_only + b_only + neither + 2
    b, c = a_only + 0.5, b_only + 0.5
    d = (c - b) / n
    se = np.sqrt(max((b + c) - (c - b) ** 2 / n, 0.0)) / n
    z = norm.ppf(0.975)
    return max(d - z * se, -1.0), min(d + z * se, 1.0)


def paired(rows):
    both = sum(1 for ra, rb in rows if ra and rb)
    a_only = sum(1 for ra, rb in rows if ra and not rb)
    b_only = sum(1 for ra, rb in rows if rb and not ra)
    neither = len(rows) - both - a_only - b_only
    n = len(rows)
    table = np.array([[both, a_only], [b_only, neither]])
    p = 1.0 if a_only + b_only == 0 else float(mcnemar(table, exact=True).pvalue)
    lo, hi = agresti_min(both, a_only, b_only, neither)
    return {"n": n, "both": both, "a_only": a_only, "b_only": b_only,
            "accuracy_a": (both + a_only) / n, "accuracy_b": (both + b_only) / n,
            "difference": (b_only - a_only) / n, "ci_low": lo, "ci_high": hi, "mcnemar_p": p}


def compare(a, b):
    answered = lambda run: {k: v for k, v in run.items() if "unanswerable" not in v}
    aa, bb = answered(a), answered(b)
    shared = [k for k in aa if k in bb]
    cat = lambda p: LETTERS.index(p) if p else 4
    table = np.zeros((5, 5), int)
    for k in shared:
        table[cat(aa[k]["model_prediction"]), cat(bb[k]["model_prediction"])] += 1
    labelled = [k for k in shared if aa[k].get("correct_answer")]
    right = lambda run, k: run[k]["model_prediction"] == run[k]["correct_answer"]
    groups = {"overall": labelled}
    for t in sorted({aa[k]["task_name"] for k in labelled}):
        groups[t] = [k for k in labelled if aa[k]["task_name"] == t]
    return {
        "shared": len(shared),
        "only_a": [k for k in aa if k not in b],
        "only_b": [k for k in bb if k not in a],
        "unanswerable_a": [k for k, v in a.items() if "unanswerable" in v],
        "unanswerable_b": [k for k, v in b.items() if "unanswerable" in v],
        "unlabelled": len(shared) - len(labelled),
        "failed": [sum(1 for k in shared if not aa[k]["model_prediction"]),
                   sum(1 for k in shared if not bb[k]["model_prediction"])],
        "agreement": float(np.trace(table)) / len(shared),
        "kappa": float(cohens_kappa(table).kappa),
        "disagreements": [k for k in shared if aa[k]["model_prediction"] != bb[k]["model_prediction"]],
        "groups": {g: paired([(right(aa, k), right(bb, k)) for k in ks]) for g, ks in groups.items()},
    }


def main():
    a, b = make_runs(np.random.default_rng(2506_04353))
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, run in [("a", a), ("b", b)]:
        (FIXTURES / f"{name}.json").write_text(json.dumps(run, indent=1) + "\n")
    import scipy
    import statsmodels
    golden = {"written_by": "tests/reference/compare_golden.py",
              "versions": {"statsmodels": statsmodels.__version__, "scipy": scipy.__version__,
                           "numpy": np.__version__}}
    golden.update(compare(a, b))
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
    g = golden["groups"]
    print(f"shared {golden['shared']}, kappa {golden['kappa']:.4f}, "
          + ", ".join(f"{k}: n {v['n']} p {v['mcnemar_p']:.3g}" for k, v in g.items()))


if __name__ == "__main__":
    main()
