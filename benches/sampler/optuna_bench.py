"""Optuna's side of `cargo xtask bench sampler`.

Times Optuna 5.0's TPESampler (in-memory storage) for one ask + tell on the
6-parameter `space6` (a fine-tuning space: learning rate, weight decay,
batch size, warmup, optimizer, scheduler) at histories of 100, 500 and 1,000 COMPLETE
trials (random parameters, the same synthetic objective as
crates/hpo-sampler/benches/common/mod.rs), and runs the quality functions
(Hartmann6, Branin, 10-D Styblinski-Tang with 5 integer dimensions) with
`TPESampler(seed=s)` for N trials per seed. Prints the same line format as
the Rust example `sampler_bench`: `timing optuna HISTORY MEDIAN_US MEAN_US`
and `quality FUNCTION optuna BEST,BEST,...`. `timing optuna-steady` is the
steady state of a running study (TPE's own history; see
`time_ask_tell_steady`), as `sampler_bench`'s `-steady` timings.

Usage: python optuna_bench.py [--seeds 50] [--seeds-other 50] [--trials 100] [--reps 20]
                              [--skip-quality] [--skip-steady]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

optuna.logging.set_verbosity(optuna.logging.ERROR)

SPACE6 = {
    "batch_size": IntDistribution(16, 256, step=16),
    "lr": FloatDistribution(1e-5, 1e-1, log=True),
    "optimizer": CategoricalDistribution(["adam", "adamw", "sgd"]),
    "scheduler": CategoricalDistribution(["linear", "cosine", "constant"]),
    "warmup_steps": IntDistribution(1, 1000, log=True),
    "weight_decay": FloatDistribution(0.0, 0.3),
}


def objective6(p: dict) -> float:
    lr = math.log10(p["lr"])
    ws = math.log(p["warmup_steps"])
    opt = ["adam", "adamw", "sgd"].index(p["optimizer"])
    sch = ["linear", "cosine", "constant"].index(p["scheduler"])
    return ((lr + 3.5) ** 2 + 4.0 * (p["weight_decay"] - 0.1) ** 2
            + ((p["batch_size"] - 64.0) / 128.0) ** 2 + 0.05 * (ws - 4.0) ** 2
            + [0.0, -0.2, 0.5][opt] + [0.1, 0.0, 0.3][sch])


def random_history(n: int, seed: int) -> list:
    rng = np.random.RandomState(seed)
    trials = []
    for _ in range(n):
        p = {
            "batch_size": int(16 * rng.randint(1, 17)),
            "lr": float(math.exp(rng.uniform(math.log(1e-5), math.log(1e-1)))),
            "optimizer": ["adam", "adamw", "sgd"][rng.randint(3)],
            "scheduler": ["linear", "cosine", "constant"][rng.randint(3)],
            "warmup_steps": int(min(1000, max(1, round(math.exp(rng.uniform(math.log(0.5), math.log(1000.5))))))),
            "weight_decay": float(rng.uniform(0.0, 0.3)),
        }
        trials.append(optuna.trial.create_trial(params=p, distributions=SPACE6, value=objective6(p)))
    return trials


def time_ask_tell(n: int, reps: int) -> dict:
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1))
    study.add_trials(random_history(n, 7))
    samples = []
    for _ in range(reps + 2):
        start = time.perf_counter()
        trial = study.ask(fixed_distributions=SPACE6)
        study.tell(trial, objective6(trial.params))
        samples.append((time.perf_counter() - start) * 1e6)
    samples = sorted(samples[2:])
    return {"history": n, "median_us": samples[len(samples) // 2],
            "mean_us": sum(samples) / len(samples)}


def time_ask_tell_steady(n: int, reps: int) -> dict:
    """The steady state of a running study: TPE first runs the study from
    nothing up to n trials (unmeasured), so the history is its own, then
    reps more asks are timed."""
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1))
    for _ in range(n):
        trial = study.ask(fixed_distributions=SPACE6)
        study.tell(trial, objective6(trial.params))
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        trial = study.ask(fixed_distributions=SPACE6)
        study.tell(trial, objective6(trial.params))
        samples.append((time.perf_counter() - start) * 1e6)
    samples = sorted(samples)
    return {"history": n, "median_us": samples[len(samples) // 2],
            "mean_us": sum(samples) / len(samples)}


def hartmann6(trial) -> float:
    alpha = [1.0, 1.2, 3.0, 3.2]
    a = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
         [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
    p = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
         [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
         [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
         [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]
    x = [trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(6)]
    return -sum(alpha[i] * math.exp(-sum(a[i][j] * (x[j] - p[i][j]) ** 2 for j in range(6)))
                for i in range(4))


def branin(trial) -> float:
    x1 = trial.suggest_float("x1", -5.0, 10.0)
    x2 = trial.suggest_float("x2", 0.0, 15.0)
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def styblinski_tang10(trial) -> float:
    y = 0.0
    for i in range(10):
        x = trial.suggest_float(f"x{i}", -5.0, 5.0) if i < 5 else trial.suggest_int(f"x{i}", -5, 5)
        y += x ** 4 - 16 * x ** 2 + 5 * x
    return 0.5 * y


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--seeds-other", type=int, default=50)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--skip-steady", action="store_true",
                    help="skip the steady-state timings (a study run up to each size first)")
    args = ap.parse_args()

    print(f"version optuna {optuna.__version__}", flush=True)
    for n in (100, 500, 1000):
        t = time_ask_tell(n, args.reps)
        print(f"timing optuna {n} {t['median_us']:.3f} {t['mean_us']:.3f}", flush=True)
    if not args.skip_steady:
        for n in (100, 500, 1000):
            t = time_ask_tell_steady(n, args.reps)
            print(f"timing optuna-steady {n} {t['median_us']:.3f} {t['mean_us']:.3f}", flush=True)
    if not args.skip_quality:
        for name, f, seeds in (("hartmann6", hartmann6, args.seeds),
                               ("branin", branin, args.seeds_other),
                               ("styblinski_tang10", styblinski_tang10, args.seeds_other)):
            bests = []
            for seed in range(seeds):
                study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
                study.optimize(f, n_trials=args.trials)
                bests.append(study.best_value)
            print(f"quality {name} optuna {','.join(f'{b:.6f}' for b in bests)}", flush=True)


if __name__ == "__main__":
    main()
