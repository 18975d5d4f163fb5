"""The `legacy` step's figures and verdict: memtune's study (its storage)
beside the Optuna + PyTorch baseline (legacy_study.py's JSON), each run for
the same wall time on the same device and documents.

    python legacy_figures.py --docs DOCS --memtune-db DB --memtune-seconds S
        [--memtune-smi FILE] --baseline-json FILE --baseline-seconds S
        [--baseline-smi FILE] --out FIGURES [--min-ratio 1.5]

For each side: trials started, completed, lost to OOM (memtune: trials
failed by OOM; the baseline: pruned by OOM), OOM retries, useful tokens per
hour (training tokens of completed trials over the process's wall time),
mean trials in flight (trial time over wall time) and the peak device
memory nvidia-smi saw (the `*-smi` files: one reading in MiB a line).
memtune's tokens are counted from its records: every document is longer
than any max length, so each of a completed trial's training examples is
`max_length` tokens every epoch it ran, and its training examples are the
documents less memtune's validation split (per class round(n * 0.2)).

Writes FIGURES (one JSON object) and exits 1 unless memtune lost no trial to
OOM, retried no OOM step, trained at least `--min-ratio` times the
baseline's useful tokens per hour, and priced every trial exactly: its
requested peak at most its predicted peak and within 1% of it.
"""

import argparse
import json
import sqlite3
import sys
from collections import Counter
from datetime import datetime


def peak_mib(path):
    if not path:
        return None
    try:
        values = [float(v) for v in open(path).read().split() if v.replace(".", "", 1).isdigit()]
    except OSError:
        return None
    return max(values) if values else None


def train_examples(docs_path, fraction=0.2):
    labels = Counter(json.loads(line)["label"] for line in open(docs_path) if line.strip())
    return sum(n - round(n * fraction) for n in labels.values())


def parse_time(text):
    return datetime.fromisoformat(text) if text else None


def memtune_side(db_path, seconds, docs_path):
    db = sqlite3.connect(db_path)
    trials = {tid: {"number": n, "state": s, "start": parse_time(a), "end": parse_time(b)}
              for tid, n, s, a, b in db.execute(
                  "SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials")}
    for tid, key, value in db.execute("SELECT trial_id, key, value_json FROM trial_user_attributes"):
        if tid in trials:
            trials[tid].setdefault("attrs", {})[key] = json.loads(value)
    # A trial the timeout caught before it was admitted never ran (FAIL with
    # error_kind "not_started", its retry WAITING for the next run).
    trials = {tid: t for tid, t in trials.items()
              if t["state"] != "WAITING" and t.get("attrs", {}).get("error_kind") != "not_started"}
    n_train = train_examples(docs_path)
    useful, busy, pricing = 0, 0.0, []
    for t in trials.values():
        a = t.get("attrs", {})
        if t["start"] and t["end"]:
            busy += (t["end"] - t["start"]).total_seconds()
        if t["state"] == "COMPLETE":
            useful += n_train * a["config"]["max_length"] * a.get("epochs_run", a["config"]["epochs"])
        if "requested_peak_bytes" in a:
            pricing.append({"number": t["number"], "predicted": a.get("predicted_peak_bytes"),
                            "requested": a["requested_peak_bytes"]})
    attrs = [t.get("attrs", {}) for t in trials.values()]
    # Tokens a micro-batch (rows x max length): under the runner's floor on
    # CUDA only where the empty device fits no more.
    micro_tokens = sorted(a["micro_batch"] * a["config"]["max_length"]
                          for a in attrs if "micro_batch" in a and "config" in a)
    # Seconds before a trial's first step, by part (workers that report it).
    startup = {part: sorted(a["startup_seconds"][part] for a in attrs if "startup_seconds" in a)
               for part in ("data", "device", "model")}
    return {
        "trials_started": len(trials),
        "trials_completed": sum(1 for t in trials.values() if t["state"] == "COMPLETE"),
        "trials_failed": sum(1 for t in trials.values() if t["state"] == "FAIL"),
        "lost_to_oom": sum(1 for a in attrs if a.get("oom")),
        "oom_retries": sum(len(a.get("oom_retries") or []) for a in attrs),
        "train_examples": n_train,
        "useful_tokens": useful,
        "useful_tokens_per_hour": useful / seconds * 3600,
        "mean_trials_in_flight": busy / seconds,
        "seconds": seconds,
        "devices": sorted({str(a.get("device")) for a in attrs if a.get("device")}),
        "micro_batch_tokens": {
            "min": micro_tokens[0] if micro_tokens else None,
            "median": micro_tokens[len(micro_tokens) // 2] if micro_tokens else None,
            "under_4096": sum(1 for t in micro_tokens if t < 4096),
        },
        "startup_seconds_median": {part: (v[len(v) // 2] if v else None)
                                   for part, v in startup.items()},
    }, pricing


def baseline_side(path, seconds):
    b = json.load(open(path))
    return {
        "trials_started": b["trials_started"],
        "trials_completed": b["trials_completed"],
        "trials_failed": b["trials_failed"],
        "lost_to_oom": b["trials_pruned_by_oom"],
        "oom_retries": b["oom_retries"],
        "train_examples": b["train_examples"],
        "useful_tokens": b["useful_tokens"],
        "useful_tokens_per_hour": b["useful_tokens"] / seconds * 3600,
        "mean_trials_in_flight": b["mean_trials_in_flight"] * b["seconds"] / seconds,
        "seconds": seconds,
        "torch_peak_reserved_bytes": b.get("torch_peak_reserved_bytes"),
        "device": b.get("device"),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--docs", required=True)
    p.add_argument("--memtune-db", required=True)
    p.add_argument("--memtune-seconds", type=float, required=True)
    p.add_argument("--memtune-smi")
    p.add_argument("--baseline-json", required=True)
    p.add_argument("--baseline-seconds", type=float, required=True)
    p.add_argument("--baseline-smi")
    p.add_argument("--out", required=True)
    p.add_argument("--min-ratio", type=float, default=1.5)
    args = p.parse_args()

    memtune, pricing = memtune_side(args.memtune_db, args.memtune_seconds, args.docs)
    memtune["peak_device_memory_mib"] = peak_mib(args.memtune_smi)
    baseline = baseline_side(args.baseline_json, args.baseline_seconds)
    baseline["peak_device_memory_mib"] = peak_mib(args.baseline_smi)
    mispriced = [t for t in pricing
                 if t["predicted"] is None or not (0.99 * t["predicted"] <= t["requested"] <= t["predicted"])]
    ratio = (memtune["useful_tokens_per_hour"] / baseline["useful_tokens_per_hour"]
             if baseline["useful_tokens_per_hour"] > 0 else None)
    failures = []
    if memtune["lost_to_oom"]:
        failures.append(f"memtune lost {memtune['lost_to_oom']} trial(s) to OOM")
    if memtune["oom_retries"]:
        failures.append(f"memtune retried {memtune['oom_retries']} OOM step(s)")
    if not memtune["trials_completed"]:
        failures.append("memtune completed no trial")
    if len(pricing) < memtune["trials_completed"]:
        failures.append(f"only {len(pricing)} of {memtune['trials_completed']} completed trials record a requested peak")
    if mispriced:
        failures.append(f"{len(mispriced)} trial(s) not priced within 1% above their requested peak: {mispriced[:5]}")
    if ratio is not None and ratio < args.min_ratio:
        failures.append(f"memtune's useful tokens/hour are {ratio:.2f}x the baseline's, below {args.min_ratio}x")
    figures = {
        "memtune": memtune,
        "baseline": baseline,
        "useful_tokens_per_hour_ratio": ratio,
        "max_requested_over_predicted": max((t["requested"] / t["predicted"] for t in pricing if t["predicted"]),
                                            default=None),
        "min_requested_over_predicted": min((t["requested"] / t["predicted"] for t in pricing if t["predicted"]),
                                            default=None),
        "passed": not failures,
        "failures": failures,
    }
    json.dump(figures, open(args.out, "w"), indent=1)
    for side in ("memtune", "baseline"):
        f = figures[side]
        print(f"{side:9} started {f['trials_started']:4}  completed {f['trials_completed']:4}  "
              f"lost to OOM {f['lost_to_oom']:3}  OOM retries {f['oom_retries']:3}  "
              f"useful tokens/h {f['useful_tokens_per_hour']:14.0f}  in flight {f['mean_trials_in_flight']:.2f}  "
              f"peak {f['peak_device_memory_mib']} MiB")
    tokens = memtune["micro_batch_tokens"]
    print(f"memtune micro-batch tokens: min {tokens['min']}, median {tokens['median']}, "
          f"{tokens['under_4096']} trial(s) under 4096")
    print(f"ratio {ratio}" if ratio is None else f"ratio {ratio:.2f}x")
    for failure in failures:
        print("FAIL:", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
