#!/bin/bash
# Submits a ReXVQA evaluation as a job array of N shards and its merge after them:
#
#   MODEL=… MMPROJ=… SPLIT=… OUTDIR=… deploy/slurm/submit.sh N [sbatch options…]
#
# Prints the merge job's id. Extra options (a partition, --gpus-per-task=1) go to both jobs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
n="${1:?usage: submit.sh N [sbatch options…]}"; shift
: "${MODEL:?}" "${SPLIT:?}" "${OUTDIR:?}"
mkdir -p "$OUTDIR"
array=$(sbatch --parsable --export=ALL --chdir="$OUTDIR" --array="1-$n" "$@" "$here/eval.sbatch")
sbatch --parsable --export=ALL --chdir="$OUTDIR" --dependency="afterok:${array%%;*}" "$@" "$here/merge.sbatch"
