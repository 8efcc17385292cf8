#!/usr/bin/env python3
"""Where a Chrome trace's time went, per thread: V8's CPU-profile samples by function (self
time, JavaScript and WebAssembly frames), and trace events by name (total wall time).

    python3 bench/trace_summary.py trace.json [--top 25] [--thread WORD] [--json out.json]

The trace comes from `node bench/browser-bench.mjs ... --trace trace.json`. Standard library only.
"""
import argparse
import collections
import json
import sys


def load(path):
    with open(path, "rb") as f:
        raw = json.load(f)
    return raw["traceEvents"] if isinstance(raw, dict) else raw


def thread_names(events):
    names, procs = {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        if e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    return names, procs


def profiles(events):
    """CPU profiles by (pid, profile id): nodes, and (node id, delta µs) samples, with the thread
    that the Profile event named."""
    out = {}
    for e in events:
        if e.get("name") == "Profile":
            out.setdefault((e["pid"], e["id"]), {"tid": e["tid"], "nodes": {}, "samples": []})
    for e in events:
        if e.get("name") != "ProfileChunk":
            continue
        p = out.setdefault((e["pid"], e["id"]), {"tid": e["tid"], "nodes": {}, "samples": []})
        data = e["args"]["data"]
        cpu = data.get("cpuProfile", {})
        for n in cpu.get("nodes", []):
            p["nodes"][n["id"]] = n
        p["samples"].extend(zip(cpu.get("samples", []), data.get("timeDeltas", [])))
    for p in out.values():
        for n in p["nodes"].values():
            for c in n.get("children", []):
                if c in p["nodes"]:
                    p["nodes"][c].setdefault("parent", n["id"])
    return out


def frame_name(node):
    cf = node.get("callFrame", {})
    name = cf.get("functionName") or "(anonymous)"
    url = cf.get("url", "")
    if url:
        name += "  [" + url.rsplit("/", 1)[-1][:40] + "]"
    return name


def summarize(path, top, want):
    events = load(path)
    names, procs = thread_names(events)
    report = {"profiles": [], "events": []}
    for (pid, pid_id), p in profiles(events).items():
        thread = names.get((pid, p["tid"]), str(p["tid"]))
        label = f"{procs.get(pid, pid)} / {thread}"
        if want and want.lower() not in label.lower():
            continue
        self_us = collections.Counter()
        total = 0
        # Inclusive time: each sample counts once for every distinct frame on its stack.
        incl_us = collections.Counter()
        for node_id, dt in p["samples"]:
            dt = max(dt, 0)
            node = p["nodes"].get(node_id)
            if node is None:
                continue
            self_us[frame_name(node)] += dt
            total += dt
            seen = set()
            while node is not None:
                n = frame_name(node)
                if n not in seen:
                    incl_us[n] += dt
                    seen.add(n)
                node = p["nodes"].get(node.get("parent"))
        if total == 0:
            continue
        report["profiles"].append({
            "thread": label,
            "sampled_ms": total / 1000,
            "self": [(k, v / 1000) for k, v in self_us.most_common(top)],
            "inclusive": [(k, v / 1000) for k, v in incl_us.most_common(top)],
        })
    by_thread = collections.defaultdict(collections.Counter)
    counts = collections.defaultdict(collections.Counter)
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        label = f"{procs.get(e['pid'], e['pid'])} / {names.get((e['pid'], e['tid']), e['tid'])}"
        if want and want.lower() not in label.lower():
            continue
        by_thread[label][e["name"]] += e["dur"]
        counts[label][e["name"]] += 1
    for label, c in by_thread.items():
        report["events"].append({
            "thread": label,
            "top": [(k, v / 1000, counts[label][k]) for k, v in c.most_common(top)],
        })
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--thread", help="only threads whose process/thread label has this word")
    ap.add_argument("--json")
    a = ap.parse_args()
    r = summarize(a.trace, a.top, a.thread)
    for p in r["profiles"]:
        print(f"\n## CPU samples: {p['thread']}  ({p['sampled_ms']:.0f} ms sampled)")
        print("self ms   function")
        for k, v in p["self"]:
            print(f"{v:8.1f}  {k}")
        print("incl ms   function")
        for k, v in p["inclusive"]:
            print(f"{v:8.1f}  {k}")
    for e in r["events"]:
        print(f"\n## trace events: {e['thread']}")
        print("total ms  count  event")
        for k, v, n in e["top"]:
            print(f"{v:8.1f} {n:6d}  {k}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
