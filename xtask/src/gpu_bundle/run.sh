#!/usr/bin/env bash
# The GPU check, made by `cargo xtask gpu-test` into .device/.
#   bash .device/run.sh [--dry-run] [--together] [STEP...]
# Runs each step (all when none is named) under its own time limit, never
# stopping at a failure, and writes gpu-report.json and gpu-report.md into
# $OUT (default .device/out). --dry-run runs nothing on a GPU: every step is
# reported skipped with the reason (CI checks the script and report this way).
# --together starts the named steps at once, each its own process (for the
# functional steps, which share a device without changing each other's
# results; timed steps belong alone), and reports them in order.
set -uo pipefail
cd "$(dirname "$0")"
BUNDLE=$PWD
OUT="${OUT:-$BUNDLE/out}"
PY="${PYTHON:-python3}"
export OUT PY
ALL_STEPS=(ops determinism gpu-mem latency throughput profile memory-plan finetune study poison legacy)
# Seconds per step (at most 8 minutes each); their sum stays within 55 minutes.
declare -A LIMIT=([ops]=360 [determinism]=180 [gpu-mem]=180 [latency]=180 [throughput]=420 [profile]=180 [memory-plan]=360 [finetune]=300 [study]=360 [poison]=180 [legacy]=480)

usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; echo "steps: ${ALL_STEPS[*]}"; }

DRY=0
TOGETHER=0
STEPS=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    --together) TOGETHER=1 ;;
    -h|--help) usage; exit 0 ;;
    *)
      if [[ " ${ALL_STEPS[*]} " == *" $arg "* ]]; then STEPS+=("$arg")
      else echo "run.sh: unknown step '$arg' (steps: ${ALL_STEPS[*]})" >&2; exit 2; fi ;;
  esac
done
[ ${#STEPS[@]} -eq 0 ] && STEPS=("${ALL_STEPS[@]}")
mkdir -p "$OUT"

# Why no step can use a GPU here, or empty.
NO_GPU=""
if [ $DRY -eq 1 ]; then
  NO_GPU="dry run: nothing was run on a GPU"
else
  # The bundle carries its binaries xz-compressed (`cargo xtask gpu-test`).
  UNPACKED=1
  "$PY" - bin/*.xz <<'PY' || UNPACKED=0
import lzma, os, sys
for path in sys.argv[1:]:
    if not path.endswith(".xz") or not os.path.exists(path):
        continue
    with lzma.open(path) as f:
        data = f.read()
    with open(path[:-3], "wb") as f:
        f.write(data)
    os.chmod(path[:-3], 0o755)
    os.remove(path)
PY
  # The CUDA libraries of the image's PyTorch (pip nvidia-* wheels, CUDA 12
  # or 13 layouts); memtune picks the newest the driver runs.
  NVIDIA_DIRS=$("$PY" -c 'import nvidia, os; print(os.pathsep.join(nvidia.__path__))' 2>/dev/null || true)
  export MEMTUNE_CUDA_LIB_DIRS="${MEMTUNE_CUDA_LIB_DIRS:+$MEMTUNE_CUDA_LIB_DIRS:}$NVIDIA_DIRS"
  if [ $UNPACKED -eq 0 ]; then
    NO_GPU="cannot unpack the bundle's binaries (bin/*.xz) with $PY"
  elif ! ./bin/memtune devices >"$OUT/devices.txt" 2>&1; then
    NO_GPU="memtune devices failed: $(tail -n 1 "$OUT/devices.txt")"
  elif grep -q '^cuda: unavailable: ' "$OUT/devices.txt"; then
    NO_GPU="no GPU: $(grep '^cuda: unavailable: ' "$OUT/devices.txt" | sed 's/^cuda: unavailable: //')"
  fi
fi

json_escape() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/ }
  s=${s//$'\r'/ }
  s=${s//$'\n'/\\n}
  printf '%s' "$s"
}

one() { ls $1 2>/dev/null | head -n 1; }

# Each step prints what it ran; its exit status says passed (0) or failed.
# A step that is not in this bundle prints why and returns 3 (skipped).
# A step may also write one JSON object of measured figures to
# $OUT/<step>.figures.json; the report puts it into the step's entry.
# The reference kernels' tests (cuda_ops) and the fused kernels' (cuda_fused),
# each binary in full even when the other fails; what passing tests print
# (the typed out-of-memory error, measured errors) goes into the log too.
# Buffers that their first op overwrites hold NaN until it does
# (MEMTUNE_CUDA_POISON=1), so an op that leaves part of one unwritten fails
# against the CPU instead of reading what the memory held.
step_ops() { local t rc=0
  for t in cuda_ops cuda_fused; do local b; b=$(one "bin/$t-*"); [ -n "$b" ] || { echo "$t test binary missing"; rc=1; continue; }
    MEMTUNE_CUDA_POISON=1 "$b" --include-ignored --test-threads=1 --nocapture --skip the_same_seed || rc=1; done; return $rc; }
step_determinism() { local t rc=0
  for t in cuda_ops cuda_fused; do local b; b=$(one "bin/$t-*"); [ -n "$b" ] || { echo "$t test binary missing"; rc=1; continue; }
    MEMTUNE_CUDA_POISON=1 "$b" --include-ignored --test-threads=1 the_same_seed || rc=1; done; return $rc; }
step_gpu-mem() { local t; t=$(one 'bin/gpu-*'); [ -n "$t" ] || { echo "gpu-mem test binary missing"; return 1; }
  "$t" --include-ignored --test-threads=1; }
step_latency() { MEMTUNE_TORCH_LATENCY_SCRIPT=torch_latency.py ./bin/gpu_latency --python "$PY"; }
# Ours (bf16 products) with the fused kernels beside HF eager (autocast
# bf16, fused AdamW) on BERT-base b32 s128 and b8 s512, MiniLM-L6 b32 s64
# and DeBERTa-v3-base b32 s128 (its attention unfused), and beside HF + torch.compile on BERT-base b32 s128 (one model to
# compile: two did not fit the step's time), in one run; then our reference
# kernels alone, and our fused kernels alone with synchronous uploads. Each
# figure is the median of 3 timed runs of 40 steps, with
# MFU and, for ours, the host's busy time and launches per step. Fails
# unless the fused BERT-base b32 s128 step is at least 1.5x torch.compile's
# and MiniLM-L6 at least 5x HF eager's. The first run's figures go into the
# report; the reference kernels' and the fused ones' with synchronous
# uploads (MEMTUNE_CUDA_UPLOADS=sync) beside them in $OUT.
step_throughput() { local rc=0 models=bert-base,bert-base-s512,minilm-l6,deberta-v3-base
  MEMTUNE_CUDA_KERNELS=fused ./bin/gpu_throughput --device cuda --python "$PY" --script torch_gpu_throughput.py \
    --models $models --compile-models bert-base --steps 40 --warmup 8 --repeats 3 \
    --json "$OUT/throughput.figures.json" --require-speedup bert-base=compiled:1.5 \
    --require-speedup minilm-l6=eager:5 || rc=1
  MEMTUNE_CUDA_KERNELS=reference ./bin/gpu_throughput --device cuda --models $models --steps 40 --warmup 8 \
    --repeats 3 --json "$OUT/throughput-reference.json" || rc=1
  # The fused step with a wait after each upload (the staged ring's
  # alternative), beside the first call's.
  MEMTUNE_CUDA_KERNELS=fused MEMTUNE_CUDA_UPLOADS=sync ./bin/gpu_throughput --device cuda --models $models \
    --steps 40 --warmup 8 --repeats 3 --json "$OUT/throughput-sync.json" || rc=1
  return $rc; }
# Where the fused BERT-base step's time goes (b32 s128, bf16 products):
# Nsight Compute's duration of every kernel of one warm-up and two timed
# steps. profile.figures.json has the last step's kernels (from the launch
# after the second-to-last optimiser launch through the last one) summed
# per kernel, the largest first, and every kernel's total over the run (the
# model's initialisation too). Skipped where ncu is missing.
step_profile() { command -v ncu >/dev/null || { echo "skipped: ncu is not on the PATH"; return 3; }
  MEMTUNE_CUDA_KERNELS=fused ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$OUT/profile.ncu.csv" ./bin/gpu_throughput --device cuda --models bert-base --steps 2 --warmup 1 \
    || { tail -n 20 "$OUT/profile.ncu.csv"; return 1; }
  "$PY" - "$OUT/profile.ncu.csv" "$OUT/profile.figures.json" <<'PY'
import csv, json, sys
# ncu names the unit in either form ("ns" or "nsecond").
scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
         "s": 1e3, "second": 1e3}
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
launches = []
for row in csv.DictReader(lines):
    if row.get("Metric Name") != "gpu__time_duration.sum":
        continue
    ms = float(row["Metric Value"].replace(",", "")) * scale[row["Metric Unit"]]
    launches.append((row["Kernel Name"].split("(")[0], ms))
if not launches:
    sys.exit("ncu reported no kernel durations")

def by_kernel(part):
    kernels = {}
    for name, ms in part:
        k = kernels.setdefault(name, {"kernel": name, "launches": 0, "ms": 0.0})
        k["launches"] += 1
        k["ms"] += ms
    total = sum(k["ms"] for k in kernels.values())
    top = sorted(kernels.values(), key=lambda k: -k["ms"])
    for k in top:
        k["share"] = k["ms"] / total
    return total, top

# A step ends with its optimiser launch (adamw_multi, or adamw per tensor
# on the reference kernels): the last step is what follows the optimiser
# launches of the step before.
ends = [i for i, (name, _) in enumerate(launches) if name.startswith("adamw")]
steps = [i for i in ends if i + 1 >= len(launches) or not launches[i + 1][0].startswith("adamw")]
if len(steps) < 2:
    sys.exit(f"found {len(steps)} optimiser steps in the profile, need 2")
step_total, step = by_kernel(launches[steps[-2] + 1 : steps[-1] + 1])
run_total, run = by_kernel(launches)
print(f"one step: {sum(k['launches'] for k in step)} launches, {step_total:.2f} ms of kernel time "
      f"(the whole run: {len(launches)} launches, {run_total:.2f} ms)")
print("| kernel | launches | ms | share |\n| --- | ---: | ---: | ---: |")
for k in step[:30]:
    print(f"| {k['kernel'][:80]} | {k['launches']} | {k['ms']:.3f} | {100 * k['share']:.1f}% |")
json.dump({"step_ms": step_total, "step": step, "total_ms": run_total, "kernels": run},
          open(sys.argv[2], "w"), indent=1)
PY
}
step_memory-plan() { local t; t=$(one 'bin/cuda_memory_plan-*'); [ -n "$t" ] || { echo "cuda_memory_plan test binary missing"; return 1; }
  MEMTUNE_TORCH_PYTHON="$PY" MEMTUNE_TORCH_MEMORY_SCRIPT=torch_memory_peak.py "$t" --include-ignored --test-threads=1 --nocapture; }
step_finetune() { local t; t=$(one 'bin/cuda_finetune-*'); [ -n "$t" ] || { echo "cuda_finetune test binary missing"; return 1; }
  MEMTUNE_MINILM_DIR="$PWD/minilm" "$t" --include-ignored --test-threads=1 --nocapture; }
# `memtune tune` with device = "cuda:*" (every visible device; one on the
# bundle's machine): 20 MiniLM trials packed onto the
# device, every one COMPLETE on cuda:0 (none lost to OOM, no OOM step
# retried), with trials/hour and the measured peaks beside the plan's
# predictions.
step_study() { local d="$OUT/study"; rm -rf "$d"; mkdir -p "$d"
  sed "s#MODEL_DIR#$PWD/minilm#" study.toml >"$d/study.toml"
  local rc=0
  ./bin/memtune --storage "sqlite:///$d/study.db" tune --no-progress --config "$d/study.toml" >"$d/tune.txt" 2>&1 || rc=$?
  cat "$d/tune.txt"
  [ $rc -eq 0 ] || return 1
  "$PY" - "$d/study.db" "$d/tune.txt" "$OUT/study.figures.json" <<'PY'
import json, re, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
states = [s for (s,) in db.execute("SELECT state FROM trials")]
attrs = {}
for tid, key, value in db.execute("SELECT trial_id, key, value_json FROM trial_user_attributes"):
    attrs.setdefault(tid, {})[key] = json.loads(value)
for tid, a in sorted(attrs.items()):
    print(f"trial {tid}: device {a.get('device')}, precision {a.get('matmul_precision')}, "
          f"micro-batch {a.get('micro_batch')}, predicted peak {a.get('predicted_peak_bytes')}, "
          f"requested peak {a.get('requested_peak_bytes')}, measured peak {a.get('peak_bytes')}")
summary = open(sys.argv[2]).read()
per_hour = re.search(r"trials/hour in this run\s+([0-9.]+)", summary)
leased = re.search(r"peak memory leased\s+(.+)", summary)
figures = {
    "trials": len(states),
    "complete": states.count("COMPLETE"),
    "failed": states.count("FAIL"),
    "failed_by_oom": sum(1 for a in attrs.values() if a.get("oom")),
    "oom_retries": sum(len(a.get("oom_retries") or []) for a in attrs.values()),
    "trials_per_hour": float(per_hour.group(1)) if per_hour else None,
    "peak_memory_leased": leased.group(1).strip() if leased else None,
    "max_trial_peak_bytes": max((a.get("peak_bytes") or 0 for a in attrs.values()), default=0),
    "precisions": sorted({str(a.get("matmul_precision")) for a in attrs.values()}),
}
json.dump(figures, open(sys.argv[3], "w"))
print(json.dumps(figures))
ok = figures["trials"] == 20 and figures["complete"] == 20 and figures["oom_retries"] == 0
ok = ok and all(str(a.get("device", "")).startswith("cuda:") for a in attrs.values())
ok = ok and all(a.get("matmul_precision") in ("bf16", "fp32") for a in attrs.values())
sys.exit(0 if ok else 1)
PY
}

# A poisoned context, for real: the study step's study cut to 8 trials on 2
# workers, and after trial 2's first epoch its worker launches a kernel
# whose assert fails (MEMTUNE_FAULT, read by the bundle's fault-injection
# build), which leaves that process's CUDA context unusable. Trial 2 must be
# FAIL with CUDA_ERROR_ASSERT, no trial leased after it in its process, a
# third worker started in its place, and the other 7 COMPLETE on cuda:0.
step_poison() { local d="$OUT/poison"; rm -rf "$d"; mkdir -p "$d"
  { sed "s#MODEL_DIR#$PWD/minilm#" study.toml; echo "max_workers = 2"; } >"$d/study.toml"
  local rc=0
  MEMTUNE_FAULT="assert@2:epoch=0" ./bin/memtune --storage "sqlite:///$d/study.db" tune --no-progress \
    --config "$d/study.toml" --n-trials 8 >"$d/tune.txt" 2>&1 || rc=$?
  cat "$d/tune.txt"
  [ $rc -eq 0 ] || return 1
  "$PY" - "$d/study.db" "$OUT/poison.figures.json" <<'PY'
import json, sqlite3, sys
from datetime import datetime
db = sqlite3.connect(sys.argv[1])
trials = {tid: {"number": n, "state": s, "start": a, "end": b} for tid, n, s, a, b in
          db.execute("SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials")}
for tid, key, value in db.execute("SELECT trial_id, key, value_json FROM trial_user_attributes"):
    trials[tid].setdefault("attrs", {})[key] = json.loads(value)
by_number = {t["number"]: t for t in trials.values()}
poisoned = by_number.get(2, {})
pa = poisoned.get("attrs", {})
others = [t for n, t in by_number.items() if n != 2]
failed_at = poisoned.get("end")
later = [t for t in others if failed_at and t.get("attrs", {}).get("lease_start", "") > failed_at]
figures = {
    "trials": len(trials),
    "complete": sum(1 for t in others if t["state"] == "COMPLETE"),
    "poisoned_state": poisoned.get("state"),
    "cuda_error_msg": pa.get("cuda_error_msg"),
    "poisoned_worker_pid": pa.get("worker_pid"),
    "trials_leased_after_the_failure": len(later),
    "later_trials_in_the_poisoned_process": sum(1 for t in later if t["attrs"].get("worker_pid") == pa.get("worker_pid")),
    "devices": sorted({str(t.get("attrs", {}).get("device")) for t in others}),
    "worker_processes": len({t.get("attrs", {}).get("worker_pid") for t in trials.values()} - {None}),
}
json.dump(figures, open(sys.argv[2], "w"))
print(json.dumps(figures))
ok = figures["trials"] == 8 and figures["complete"] == 7 and figures["poisoned_state"] == "FAIL"
ok = ok and pa.get("cuda_error") is True and "CUDA_ERROR_ASSERT" in str(pa.get("cuda_error_msg"))
ok = ok and pa.get("worker_pid") is not None and figures["trials_leased_after_the_failure"] > 0
ok = ok and figures["later_trials_in_the_poisoned_process"] == 0 and figures["worker_processes"] >= 3
ok = ok and all(d.startswith("cuda:") for d in figures["devices"])
sys.exit(0 if ok else 1)
PY
}

# The legacy setup against memtune (legacy.toml's timeout each, on the same
# device and documents, under the same 24 GiB cap): memtune packs the
# seven-model space by predicted memory, the baseline (legacy_study.py:
# Optuna + PyTorch, 2 trials at a time, OOM pruned) runs as its users do.
# nvidia-smi samples the device's memory during each. legacy_figures.py
# writes the figures and fails unless memtune lost nothing to OOM, retried
# no OOM step, priced every trial within 1% above its requested peak, and
# trained at least 1.5x the baseline's useful tokens per hour.
step_legacy() { local d="$OUT/legacy"; rm -rf "$d"; mkdir -p "$d/site"
  local seconds; seconds=$(sed -n 's/^timeout = "\([0-9]*\)s".*/\1/p' legacy.toml)
  [ -n "$seconds" ] || { echo "legacy.toml has no timeout in seconds"; return 1; }
  # Optuna for the baseline, from the bundle's wheels (the device has no index).
  "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    --target "$d/site" wheels/*.whl || { echo "cannot install the baseline's Optuna from wheels/"; return 1; }
  "$PY" legacy_study.py --write-data "$d/docs.jsonl" --data-dir sentiment-labelled-sentences || return 1
  cp legacy.toml "$d/legacy.toml"
  # MEMTUNE_LEGACY_SECONDS=N gives each side N seconds instead of
  # legacy.toml's (a device whose time is short).
  if [ -n "${MEMTUNE_LEGACY_SECONDS:-}" ]; then
    [[ "$MEMTUNE_LEGACY_SECONDS" =~ ^[0-9]+$ ]] || { echo "MEMTUNE_LEGACY_SECONDS is not a whole number of seconds: $MEMTUNE_LEGACY_SECONDS"; return 1; }
    seconds=$MEMTUNE_LEGACY_SECONDS
    sed -i "s/^timeout = .*/timeout = \"${seconds}s\"/" "$d/legacy.toml"
  fi
  # MEMTUNE_LEGACY_KERNELS=reference runs memtune's side on the reference
  # kernels instead of legacy.toml's.
  if [ -n "${MEMTUNE_LEGACY_KERNELS:-}" ]; then
    sed -i "s/^kernels = .*/kernels = \"$MEMTUNE_LEGACY_KERNELS\"/" "$d/legacy.toml"
  fi
  sample() { while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -n 1; sleep 0.5; done; }
  local smi t0 t1 rc=0
  # The kernel cache warm, as on any machine after its first CUDA run (the
  # baseline's PyTorch ships its kernels compiled): one tiny step compiles
  # every family into it, untimed.
  ./bin/gpu_throughput --device cuda --models tiny --steps 1 --warmup 0 >"$d/warm-kernels.txt" 2>&1 \
    || { cat "$d/warm-kernels.txt"; return 1; }
  sample >"$d/memtune.smi" & smi=$!
  t0=$(date +%s.%N)
  ./bin/memtune --storage "sqlite:///$d/legacy.db" tune --no-progress --config "$d/legacy.toml" >"$d/tune.txt" 2>&1 || rc=$?
  t1=$(date +%s.%N); kill $smi 2>/dev/null; wait $smi 2>/dev/null
  cat "$d/tune.txt"
  [ $rc -eq 0 ] || { echo "memtune tune failed (exit status $rc)"; return 1; }
  local memtune_s; memtune_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  sample >"$d/baseline.smi" & smi=$!
  t0=$(date +%s.%N)
  PYTHONPATH="$d/site" PYTHONUNBUFFERED=1 "$PY" legacy_study.py --device cuda --seconds "$seconds" --memory-limit 24GiB \
    --data "$d/docs.jsonl" --json "$d/baseline.json" >"$d/baseline.txt" 2>&1 || rc=$?
  t1=$(date +%s.%N); kill $smi 2>/dev/null; wait $smi 2>/dev/null
  tail -n 20 "$d/baseline.txt"
  [ $rc -eq 0 ] || { echo "legacy_study.py failed (exit status $rc)"; return 1; }
  "$PY" legacy_figures.py --docs "$d/docs.jsonl" \
    --memtune-db "$d/legacy.db" --memtune-seconds "$memtune_s" --memtune-smi "$d/memtune.smi" \
    --baseline-json "$d/baseline.json" --baseline-seconds "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" \
    --baseline-smi "$d/baseline.smi" --out "$OUT/legacy.figures.json"; }

# The figures file $1 as one line of JSON, or nothing when there is none;
# fails when it is not one JSON object.
figures_of() { [ -f "$1" ] || return 0
  "$PY" -c 'import json, sys
v = json.load(open(sys.argv[1]))
if not isinstance(v, dict):
    sys.exit("not a JSON object")
print(json.dumps(v, allow_nan=False))' "$1"; }

# Step $1 under its limit, its output into its log; the exit status is the
# step's (124 or 137 when the limit stopped it).
run_step() {
  timeout --kill-after=10 "${LIMIT[$1]}" bash -c "$(declare -f "step_$1" one); step_$1" >"$OUT/$1.log" 2>&1
}

# --together: every step started now; the loop below waits for each in turn.
declare -A PIDS=() STARTED=()
if [ $TOGETHER -eq 1 ] && [ -z "$NO_GPU" ]; then
  for step in "${STEPS[@]}"; do
    rm -f "$OUT/$step.figures.json" "$OUT/.$step.end"
    echo "== $step (limit ${LIMIT[$step]} s, started with the others)"
    STARTED[$step]=$(date +%s.%N)
    ( run_step "$step"; rc=$?; date +%s.%N >"$OUT/.$step.end"; exit $rc ) &
    PIDS[$step]=$!
  done
fi

RESULTS=()
declare -A FIGURES=()
for step in "${STEPS[@]}"; do
  log="$OUT/$step.log"
  figures="$OUT/$step.figures.json"
  start=$(date +%s.%N)
  end=""
  if [ -n "$NO_GPU" ]; then
    rm -f "$figures"
    status=skipped; detail="$NO_GPU"; : >"$log"
  else
    if [ -n "${PIDS[$step]:-}" ]; then
      wait "${PIDS[$step]}"
      rc=$?
      start=${STARTED[$step]}
      end=$(cat "$OUT/.$step.end" 2>/dev/null)
      rm -f "$OUT/.$step.end"
    else
      rm -f "$figures"
      echo "== $step (limit ${LIMIT[$step]} s)"
      run_step "$step"
      rc=$?
    fi
    case $rc in
      0) status=passed; detail="ok" ;;
      3) status=skipped; detail=$(tail -n 1 "$log") ;;
      124|137) status=failed; detail="timed out after ${LIMIT[$step]} s; last lines: $(tail -n 5 "$log")" ;;
      *) status=failed; detail="exit status $rc; last lines: $(tail -n 15 "$log")" ;;
    esac
    case "$status/$step" in passed/latency|passed/throughput|passed/profile) detail=$(grep -E '^\|' "$log" || echo ok) ;; esac
    if ! FIGURES[$step]=$(figures_of "$figures" 2>&1 | tail -n 1); then
      detail="$detail (its figures in $figures are not one JSON object: ${FIGURES[$step]})"
      FIGURES[$step]=""
    fi
    echo "   $status"
  fi
  seconds=$(awk -v a="$start" -v b="${end:-$(date +%s.%N)}" 'BEGIN { printf "%.1f", b - a }')
  RESULTS+=("$step"$'\t'"$status"$'\t'"$seconds"$'\t'"$detail")
done

{
  printf '{"steps": ['
  sep=""
  for r in "${RESULTS[@]}"; do
    IFS=$'\t' read -r name status seconds detail <<<"${r//$'\n'/$'\x1f'}"
    detail=${detail//$'\x1f'/$'\n'}
    printf '%s\n  {"name": "%s", "status": "%s", "seconds": %s, "detail": "%s"' \
      "$sep" "$name" "$status" "$seconds" "$(json_escape "$detail")"
    [ -n "${FIGURES[$name]:-}" ] && printf ', "figures": %s' "${FIGURES[$name]}"
    printf '}'
    sep=","
  done
  printf '\n]}\n'
} >"$OUT/gpu-report.json"

{
  echo "# GPU report"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname)"
  [ -f "$OUT/devices.txt" ] && { echo; echo '```'; cat "$OUT/devices.txt"; echo '```'; }
  echo
  echo "| step | status | seconds | detail |"
  echo "| --- | --- | ---: | --- |"
  for r in "${RESULTS[@]}"; do
    IFS=$'\t' read -r name status seconds detail <<<"${r//$'\n'/ }"
    echo "| $name | $status | $seconds | ${detail//|/\\|} |"
  done
} >"$OUT/gpu-report.md"

echo "run.sh: report in $OUT/gpu-report.json and gpu-report.md"
grep -q '"status": "failed"' "$OUT/gpu-report.json" && exit 1
exit 0
