"""Optuna's side of the GP rows of `cargo xtask bench sampler`.

Runs Optuna 5.0's GPSampler (and TPESampler, for the same table) on the GP
quality functions: Hartmann6 (best after 20 and 50 trials of one run),
Branin (30 trials) and a 6-D mixed integer/continuous/categorical function
(50 trials, `mixed6`, the same as crates/hpo-sampler/benches/common/
functions.rs), one study per seed, and times one GPSampler ask + tell at a
history of 100 COMPLETE random trials on the 6-parameter space of
optuna_bench.py.

Prints one line per finished run, flushed, so a long run can be followed
and an interrupted one still counts what it finished:
`best FUNCTION@TRIALS LABEL SEED VALUE`, and `timing optuna-gp 100 MEDIAN_US MEAN_US`.

GPSampler needs torch and scipy (benches/sampler/requirements-gp.txt).
Usage: OMP_NUM_THREADS=1 python optuna_gp_bench.py [--seeds 50] [--samplers gp,tpe]
       [--functions hartmann6,branin,mixed6] [--skip-timing] [--reps 10]
"""

from __future__ import annotations

import argparse
import math
import time

import optuna

from optuna_bench import SPACE6, branin, hartmann6, objective6, random_history

optuna.logging.set_verbosity(optuna.logging.ERROR)

MIXED6_ACT = ["relu", "gelu", "tanh", "silu"]
MIXED6_NORM = ["none", "batch", "layer"]


def mixed6(trial) -> float:
    x = trial.suggest_float("x", -5.0, 5.0)
    lr = trial.suggest_float("lr", 1e-4, 1.0, log=True)
    layers = trial.suggest_int("layers", 1, 12)
    width = trial.suggest_int("width", 16, 512, step=16)
    act = trial.suggest_categorical("act", MIXED6_ACT)
    norm = trial.suggest_categorical("norm", MIXED6_NORM)
    u = math.log10(lr)
    return ((x - 1.3) ** 2 + 2.0 * (u + 2.0 - 0.3 * x) ** 2 + ((layers - 7) / 3.0) ** 2
            + ((width - 208) / 160.0) ** 2 + [0.3, 0.0, 0.6, 0.2][MIXED6_ACT.index(act)]
            + [0.5, 0.25, 0.0][MIXED6_NORM.index(norm)])


FUNCTIONS = {
    "hartmann6": (hartmann6, (20, 50)),
    "branin": (branin, (30,)),
    "mixed6": (mixed6, (50,)),
}


def make(label: str, seed: int):
    if label == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def time_gp_ask_tell(n: int, reps: int) -> tuple[float, float]:
    study = optuna.create_study(sampler=optuna.samplers.GPSampler(seed=1))
    study.add_trials(random_history(n, 7))
    samples = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        trial = study.ask(fixed_distributions=SPACE6)
        study.tell(trial, objective6(trial.params))
        samples.append((time.perf_counter() - start) * 1e6)
        # Keep the history at n trials: the tell above added one.
        study = optuna.create_study(sampler=study.sampler)
        study.add_trials(random_history(n, 7))
    samples = sorted(samples[1:])
    return samples[len(samples) // 2], sum(samples) / len(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--samplers", default="gp,tpe")
    ap.add_argument("--functions", default="hartmann6,branin,mixed6")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args()

    print(f"version optuna {optuna.__version__}", flush=True)
    if not args.skip_timing:
        median, mean = time_gp_ask_tell(100, args.reps)
        print(f"timing optuna-gp 100 {median:.3f} {mean:.3f}", flush=True)
    for label in args.samplers.split(","):
        for name in args.functions.split(","):
            f, checkpoints = FUNCTIONS[name]
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                study = optuna.create_study(sampler=make(label, seed))
                study.optimize(f, n_trials=max(checkpoints))
                values = [t.value for t in study.trials]
                for n in checkpoints:
                    print(f"best {name}@{n} optuna-{label} {seed} {min(values[:n]):.6f}", flush=True)


if __name__ == "__main__":
    main()
