"""Record Optuna's pruning decisions on fixed learning-curve scenarios.

Each scenario drives a real Optuna 5.0 study with one pruner: trials report a
deterministic learning curve step by step (optionally several trials in
parallel, round robin), call ``should_prune()`` after every report, and are
told PRUNED when pruned or COMPLETE at the end. Every report and its decision
is written to ``crates/hpo-sampler/tests/fixtures/pruners/<name>.json``; the
Rust test ``tests/pruner_fixtures.rs`` replays the same events and must
reproduce every decision.

Usage (from the repository root):
    $MEMTUNE_PYTHON benches/sampler/pruner_fixtures.py [OUT_DIR]
NaN values are written as null.
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import optuna

optuna.logging.set_verbosity(optuna.logging.ERROR)


def curve(rng: np.random.RandomState, n_steps: int, maximize: bool, nan_rate: float) -> list:
    """A noisy decaying loss (or rising accuracy) curve."""
    start = rng.uniform(1.0, 3.0)
    floor = rng.uniform(0.0, 1.0)
    tau = rng.uniform(2.0, n_steps / 2)
    values = []
    for s in range(n_steps):
        v = floor + (start - floor) * math.exp(-s / tau) + rng.normal(0, 0.05)
        if maximize:
            v = 3.0 - v
        if nan_rate > 0 and rng.uniform() < nan_rate:
            v = float("nan")
        values.append(round(v, 6))
    return values


def make_pruner(spec: dict) -> optuna.pruners.BasePruner:
    kind = spec["type"]
    args = {k: v for k, v in spec.items() if k not in ("type", "wrapped")}
    if kind == "nop":
        return optuna.pruners.NopPruner()
    if kind == "median":
        return optuna.pruners.MedianPruner(**args)
    if kind == "percentile":
        return optuna.pruners.PercentilePruner(**args)
    if kind == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(**args)
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(**args)
    if kind == "threshold":
        return optuna.pruners.ThresholdPruner(**args)
    if kind == "patient":
        wrapped = make_pruner(spec["wrapped"]) if spec.get("wrapped") else None
        return optuna.pruners.PatientPruner(wrapped, **args)
    raise ValueError(kind)


SCENARIOS = [
    dict(name="nop", pruner={"type": "nop"}, direction="minimize", n_trials=8, n_steps=10),
    dict(name="median_default", pruner={"type": "median"}, direction="minimize",
         n_trials=30, n_steps=20),
    dict(name="median_warmup_interval", direction="maximize", n_trials=30, n_steps=24,
         pruner={"type": "median", "n_startup_trials": 3, "n_warmup_steps": 3,
                 "interval_steps": 4, "n_min_trials": 3},
         step_stride=[1, 2, 3]),
    dict(name="percentile_25_parallel", pruner={"type": "percentile", "percentile": 25.0},
         direction="minimize", n_trials=32, n_steps=16, parallel=4),
    dict(name="percentile_75_nan", direction="maximize", n_trials=30, n_steps=15, nan_rate=0.05,
         pruner={"type": "percentile", "percentile": 75.0, "n_startup_trials": 2}),
    dict(name="sh_default", pruner={"type": "successive_halving"}, direction="minimize",
         n_trials=40, n_steps=70),
    dict(name="sh_custom_parallel", direction="maximize", n_trials=40, n_steps=40, parallel=3,
         pruner={"type": "successive_halving", "min_resource": 2, "reduction_factor": 3,
                 "min_early_stopping_rate": 1, "bootstrap_count": 2}),
    dict(name="sh_nan", direction="minimize", n_trials=25, n_steps=20, nan_rate=0.03,
         pruner={"type": "successive_halving", "min_resource": 1, "reduction_factor": 2}),
    dict(name="hyperband_default", pruner={"type": "hyperband"}, direction="minimize",
         n_trials=60, n_steps=27, parallel=2),
    dict(name="hyperband_custom", direction="maximize", n_trials=50, n_steps=30,
         pruner={"type": "hyperband", "min_resource": 2, "max_resource": 30,
                 "reduction_factor": 2}),
    dict(name="patient_alone", pruner={"type": "patient", "patience": 3}, direction="minimize",
         n_trials=15, n_steps=25),
    dict(name="patient_median", direction="maximize", n_trials=25, n_steps=20,
         pruner={"type": "patient", "patience": 2, "min_delta": 0.02,
                 "wrapped": {"type": "median", "n_startup_trials": 2}}),
    dict(name="threshold", direction="minimize", n_trials=20, n_steps=20, nan_rate=0.02,
         pruner={"type": "threshold", "lower": 0.2, "upper": 2.2, "n_warmup_steps": 2,
                 "interval_steps": 3}),
]


def run(scenario: dict, seed: int) -> dict:
    rng = np.random.RandomState(seed)
    maximize = scenario["direction"] == "maximize"
    study_name = f"fixture-{scenario['name']}"
    study = optuna.create_study(
        study_name=study_name,
        direction=scenario["direction"],
        pruner=make_pruner(scenario["pruner"]),
        sampler=optuna.samplers.RandomSampler(seed=seed),
    )
    n_steps = scenario["n_steps"]
    strides = scenario.get("step_stride", [1])
    pending = [
        curve(rng, n_steps, maximize, scenario.get("nan_rate", 0.0))
        for _ in range(scenario["n_trials"])
    ]
    events = []
    active = []  # [trial, curve, step]
    next_curve = 0
    parallel = scenario.get("parallel", 1)
    while next_curve < len(pending) or active:
        while len(active) < parallel and next_curve < len(pending):
            active.append([study.ask(), pending[next_curve], 0])
            next_curve += 1
        still = []
        for entry in active:
            trial, values, step = entry
            value = values[step]
            trial.report(value, step)
            pruned = bool(trial.should_prune())
            events.append({"trial": trial.number, "step": step,
                           "value": None if math.isnan(value) else value, "prune": pruned})
            stride = strides[(trial.number + step) % len(strides)]
            if pruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                events.append({"trial": trial.number, "tell": "PRUNED"})
            elif step + stride >= n_steps:
                final = values[step]
                final = 0.0 if math.isnan(final) else final
                study.tell(trial, final)
                events.append({"trial": trial.number, "tell": "COMPLETE", "value": final})
            else:
                entry[2] = step + stride
                still.append(entry)
        active = still
    return {
        "name": scenario["name"],
        "optuna_version": optuna.__version__,
        "study_name": study_name,
        "direction": scenario["direction"],
        "pruner": scenario["pruner"],
        "events": events,
    }


def main() -> None:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        "crates", "hpo-sampler", "tests", "fixtures", "pruners")
    os.makedirs(out_dir, exist_ok=True)
    for i, scenario in enumerate(SCENARIOS):
        fixture = run(scenario, seed=1000 + i)
        n_pruned = sum(1 for e in fixture["events"] if e.get("prune"))
        path = os.path.join(out_dir, f"{scenario['name']}.json")
        with open(path, "w") as f:
            json.dump(fixture, f, indent=None, separators=(",", ":"), allow_nan=False)
            f.write("\n")
        print(f"{path}: {len(fixture['events'])} events, {n_pruned} prune decisions")


if __name__ == "__main__":
    main()
