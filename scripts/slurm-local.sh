#!/usr/bin/env bash
# A one-node Slurm on this machine (Debian's slurm-wlm and munge), the evaluation submitted as
# deploy/slurm/submit.sh submits it (an array of N shards, then the merge), and the merged
# predictions checked question by question against an unsharded `rexvqa eval` of the same split.
#
#   scripts/slurm-local.sh [N]     (default 3 shards; needs root, installs the packages if missing)
#
# Uses the tiny GGUF pair (tests/fixtures/models) and a synthetic split; REXVQA_BIN is the CLI
# (default: a debug build, made if missing). Prints a JSON line with the result; exits non-zero
# when the merged run differs from the unsharded one. KEEP=1 keeps its work folder (logs, outputs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
N="${1:-3}"
[ "$(id -u)" = 0 ] || { echo "slurm-local.sh: run as root (it starts munged, slurmctld and slurmd)" >&2; exit 2; }
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
fi
BIN="${REXVQA_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/rexvqa}"
[ -x "$BIN" ] || cargo build -q -p rexvqa-engine --bin rexvqa

W="$(mktemp -d /tmp/rexvqa-slurm.XXXXXX)"
chmod 755 "$W"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 20); do
    pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break
    sleep 0.5
  done
  [ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT

# munge: the key Debian's package made, a socket of our own.
mkdir -p "$W/munge" && chmod 700 "$W/munge"
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
munged --force --socket="$W/munge/munge.socket" --pid-file="$W/munge/munged.pid" \
  --log-file="$W/munge/munged.log" --seed-file="$W/munge/munged.seed"
pids+=("$(cat "$W/munge/munged.pid")")

HOST="$(hostname -s)"
CPUS="$(nproc)"
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p "$W/state" "$W/spool" "$W/out"
export SLURM_CONF="$W/slurm.conf"
cat > "$SLURM_CONF" <<EOF
ClusterName=local
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$W/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
SlurmctldPort=$((20000 + RANDOM % 20000))
SlurmdPort=$((40000 + RANDOM % 20000))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -i
pids+=("$(sleep 1; cat "$W/slurmctld.pid")")
slurmd
pids+=("$(sleep 1; cat "$W/slurmd.pid")")
for _ in $(seq 30); do
  sinfo -h -o %T 2>/dev/null | grep -qx idle && break
  sleep 1
done
sinfo -h -o '%P %D %T' | grep -q idle || { echo "slurm did not come up:"; tail "$W"/*.log; exit 1; }

# The data: a synthetic split and the tiny pair.
"$BIN" synth --out "$W/rexvqa" --studies 6 --questions-per-study 3 --min-size 64 --max-size 96 --seed 21 >/dev/null
for f in tiny-q8_0.gguf tiny-q8_0-mmproj-224.gguf; do gzip -dc "tests/fixtures/models/$f.gz" > "$W/$f"; done
export MODEL="$W/tiny-q8_0.gguf" MMPROJ="$W/tiny-q8_0-mmproj-224.gguf"
export SPLIT="$W/rexvqa/metadata/test_vqa_data.json" OUTDIR="$W/out" REXVQA="$BIN" BACKEND=cpu
"$BIN" eval --model "$MODEL" --mmproj "$MMPROJ" --split "$SPLIT" --out "$W/whole.json" >/dev/null 2>&1

t0=$SECONDS
merge_job=$(deploy/slurm/submit.sh "$N")
for _ in $(seq 600); do
  [ -z "$(squeue -h -j "$merge_job" 2>/dev/null)" ] && break
  sleep 1
done
state=$(sacct -n -X -j "$merge_job" -o State 2>/dev/null | tr -d ' ' || true)
[ -s "$OUTDIR/merged.json" ] || { echo "no merged.json (merge job $merge_job $state):"; tail -n 20 "$OUTDIR"/*.log; exit 1; }

python3 - "$W/whole.json" "$OUTDIR/merged.json" "$N" "$((SECONDS - t0))" "$OUTDIR" <<'PY'
import json, sys, glob, re
whole, merged = (json.load(open(p)) for p in sys.argv[1:3])
n, secs, outdir = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
shards = sorted(p for p in glob.glob(f"{outdir}/shard-*.json") if re.search(r"shard-\d+\.json$", p))
sizes = [len(json.load(open(s))) for s in shards]
differ = [q for q in whole if whole[q] != merged.get(q)]
extra = [q for q in merged if q not in whole]
rw, rm = (json.load(open(p + ".report.json")) for p in sys.argv[1:3])
same_tables = all(rw[k] == rm[k] for k in ("official", "robust", "answered", "unanswerable"))
ok = not differ and not extra and same_tables and len(shards) == n
print(json.dumps({"shards": n, "questions_per_shard": sizes, "questions": len(whole),
                  "merged": len(merged), "differ": len(differ), "extra": len(extra),
                  "report_tables_equal": same_tables,
                  "accuracy": rm["official"]["overall"]["accuracy"], "slurm_seconds": secs,
                  "ok": ok}))
sys.exit(0 if ok else 1)
PY
