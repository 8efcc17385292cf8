#!/bin/bash
# Runs the evaluation Indexed Job, waits for it, then the merge Job:
#
#   deploy/kubernetes/run.sh [kubectl options, e.g. -n NAMESPACE]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kubectl "$@" apply -f "$here/eval-job.yaml"
kubectl "$@" wait --for=condition=complete --timeout=48h job/rexvqa-eval
kubectl "$@" apply -f "$here/merge-job.yaml"
kubectl "$@" wait --for=condition=complete --timeout=1h job/rexvqa-merge
kubectl "$@" logs job/rexvqa-merge
