#!/usr/bin/env bash
# The house's limits (DEVELOPERS.md): no engine source file over 700 lines, no app file over
# 500. Prints each file over its limit and fails; a file that grows past it is split by job.
set -euo pipefail
cd "$(dirname "$0")/.."
over=$(find engine/src app/src -name '*.rs' -print0 | xargs -0 wc -l | grep -v ' total$' |
  awk '($2 ~ /^engine\// && $1 > 700) || ($2 ~ /^app\// && $1 > 500) {printf "  %s: %d lines\n", $2, $1}')
if [ -n "$over" ]; then
  printf 'files over the house limits (engine/src 700 lines, app/src 500):\n%s\n' "$over"
  exit 1
fi
echo "house limits hold: engine/src files <= 700 lines, app/src files <= 500"
