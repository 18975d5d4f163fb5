#!/usr/bin/env bash
# The whole check in one call of at most ${BUDGET:-540} seconds, for a GPU
# machine lent briefly: `throughput` alone (it is timed), then the
# functional steps side by side (`ops determinism memory-plan` with the
# default uploads beside `finetune study poison` with synchronous ones, so
# one run checks both upload paths end to end), then `profile` and a
# `legacy` comparison cut to the time left. After each phase everything
# under the working folder is tarred into $OUT/run.tgz beside each phase's
# report, so a call stopped at its limit still returns what ran.
#   OUT=DIR [BUDGET=SECONDS] bash .device/session.sh
set -u
cd "$(dirname "$0")"
RESULTS=${OUT:-$PWD/out}
WORK=$(mktemp -d)
mkdir -p "$RESULTS" "$WORK/sync"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
save() {
  cp "$WORK/gpu-report.md" "$RESULTS/report-$1.md" 2>/dev/null
  [ "$1" = functional ] && cp "$WORK/sync/gpu-report.md" "$RESULTS/report-$1-sync.md" 2>/dev/null
  tar czf "$RESULTS/run.tgz" -C "$WORK" .
  echo "$1 done at $(elapsed) s"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv \
  >"$WORK/smi.txt" 2>&1
OUT=$WORK bash run.sh throughput
save throughput
OUT=$WORK bash run.sh --together ops determinism memory-plan >"$WORK/default-uploads.txt" 2>&1 &
OUT=$WORK/sync MEMTUNE_CUDA_UPLOADS=sync bash run.sh --together finetune study poison \
  >"$WORK/sync-uploads.txt" 2>&1 &
wait
save functional
grep -h '^| [a-z-]* | ' "$RESULTS"/report-functional*.md
if [ $(( ${BUDGET:-540} - $(elapsed) )) -gt 150 ]; then
  OUT=$WORK bash run.sh profile
  save profile
fi
left=$(( ${BUDGET:-540} - $(elapsed) ))
if [ $left -gt 200 ]; then
  OUT=$WORK MEMTUNE_LEGACY_SECONDS=$(( (left - 60) / 2 )) bash run.sh legacy
  save legacy
else
  echo "no time left for legacy ($left s)"
fi
