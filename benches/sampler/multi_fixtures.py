"""Record Optuna 5.0's multi-objective building blocks on fixed inputs.

Writes one JSON file with, per case:
- ``ranks``: ``_fast_non_domination_rank(losses, penalty=..., n_below=...)``
  on coarse grids (many ties and duplicates), with and without penalties;
- ``hypervolume``: ``compute_hypervolume(losses, reference)`` in 2 to 5
  objectives;
- ``hssp``: ``_solve_hssp`` (greedy hypervolume subset selection) on fronts;
- ``split``: multi-objective TPE's ``_split_trials`` (which trials are
  "below") on studies of COMPLETE, infeasible and RUNNING trials;
- ``best``: ``study.best_trials`` (trial numbers) with constraints.

The Rust tests ``tests/multi_fixtures.rs`` and the TPE unit tests read it.

Usage (from the repository root):
    $MEMTUNE_PYTHON benches/sampler/multi_fixtures.py [OUT_FILE]
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import optuna
from optuna._hypervolume import compute_hypervolume
from optuna._hypervolume.hssp import _solve_hssp
from optuna.distributions import FloatDistribution
from optuna.samplers._tpe.sampler import _split_trials
from optuna.study._multi_objective import _fast_non_domination_rank
from optuna.trial import TrialState, create_trial

optuna.logging.set_verbosity(optuna.logging.ERROR)


def ranks_cases(rng: np.random.RandomState) -> list:
    cases = []
    for case in range(120):
        m = 2 + case % 3
        n = 1 + rng.randint(40)
        losses = rng.randint(0, 5, size=(n, m)).astype(float)
        penalty = None
        if case % 3 == 0:
            penalty = np.where(rng.rand(n) < 0.3, rng.randint(1, 4, size=n).astype(float), 0.0)
        n_below = None if case % 4 == 0 else int(1 + rng.randint(n))
        ranks = _fast_non_domination_rank(losses, penalty=penalty, n_below=n_below)
        cases.append({
            "losses": losses.tolist(),
            "penalty": None if penalty is None else penalty.tolist(),
            "n_below": n_below,
            "ranks": [int(r) for r in ranks],
        })
    return cases


def hypervolume_cases(rng: np.random.RandomState) -> list:
    cases = []
    for case in range(80):
        m = 2 + case % 4
        n = 1 + rng.randint(12 if m > 3 else 40)
        losses = rng.rand(n, m)
        if case % 5 == 0:
            losses = np.round(losses * 4) / 4  # duplicates and ties
        reference = losses.max(axis=0) + rng.rand(m)
        cases.append({
            "losses": losses.tolist(),
            "reference": reference.tolist(),
            "hypervolume": float(compute_hypervolume(losses, reference)),
        })
    return cases


def front(rng: np.random.RandomState, n: int, m: int) -> np.ndarray:
    raw = rng.rand(n, m) + 0.01
    return raw / raw.sum(axis=1, keepdims=True)


def hssp_cases(rng: np.random.RandomState) -> list:
    cases = []
    for case in range(60):
        m = 2 + case % 2
        n = 2 + rng.randint(20)
        losses = front(rng, n, m)
        if case % 6 == 0:
            losses[n // 2] = losses[0]  # a duplicate
        k = 1 + rng.randint(n - 1)
        reference = losses.max(axis=0) * 1.1
        chosen = _solve_hssp(losses, np.arange(n), k, reference)
        cases.append({
            "losses": losses.tolist(),
            "k": k,
            "reference": reference.tolist(),
            "chosen": sorted(int(i) for i in chosen),
        })
    return cases


def trial_json(t) -> dict:
    return {
        "number": t.number,
        "state": t.state.name,
        "values": t.values,
        "x": t.params.get("x"),
        "constraints": t.system_attrs.get("constraints"),
    }


def split_cases(rng: np.random.RandomState) -> list:
    cases = []
    for case in range(40):
        m = 2 + case % 2
        directions = ["minimize" if rng.rand() < 0.5 else "maximize" for _ in range(m)]
        study = optuna.create_study(directions=directions)
        n = 5 + rng.randint(60)
        dist = FloatDistribution(0.0, 1.0)
        for _ in range(n):
            u = rng.rand()
            x = float(rng.rand())
            if u < 0.1:
                t = create_trial(state=TrialState.RUNNING, params={"x": x},
                                 distributions={"x": dist})
            else:
                values = front(rng, 1, m)[0] * (1.0 + rng.rand())
                attrs = {}
                if case % 2 == 0:
                    c = float(rng.rand() - 0.8)
                    attrs = {"constraints": [c]}
                t = create_trial(state=TrialState.COMPLETE, values=values.tolist(),
                                 params={"x": x}, distributions={"x": dist},
                                 system_attrs=attrs)
            study.add_trial(t)
        trials = study.get_trials(deepcopy=False)
        n_finished = sum(t.state != TrialState.RUNNING for t in trials)
        n_below = int(np.ceil(0.1 * n_finished)) + case % 7
        below, _ = _split_trials(study, trials, n_below)
        cases.append({
            "directions": directions,
            "trials": [trial_json(t) for t in trials],
            "n_below": n_below,
            "below": [t.number for t in below],
        })
    return cases


def best_cases(rng: np.random.RandomState) -> list:
    cases = []
    for case in range(20):
        m = 2 + case % 2
        directions = ["minimize" if rng.rand() < 0.5 else "maximize" for _ in range(m)]
        study = optuna.create_study(directions=directions)
        dist = FloatDistribution(0.0, 1.0)
        for _ in range(5 + rng.randint(40)):
            values = np.round(rng.rand(m) * 6) / 6
            attrs = {}
            if case % 2 == 0:
                attrs = {"constraints": [float(rng.rand() - 0.7)]}
            study.add_trial(create_trial(state=TrialState.COMPLETE, values=values.tolist(),
                                         params={"x": float(rng.rand())},
                                         distributions={"x": dist}, system_attrs=attrs))
        cases.append({
            "directions": directions,
            "trials": [trial_json(t) for t in study.trials],
            "best": [t.number for t in study.best_trials],
        })
    return cases


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        "crates", "hpo-sampler", "tests", "fixtures", "multi", "optuna_multi.json")
    rng = np.random.RandomState(0)
    fixture = {
        "optuna": optuna.__version__,
        "ranks": ranks_cases(rng),
        "hypervolume": hypervolume_cases(rng),
        "hssp": hssp_cases(rng),
        "split": split_cases(rng),
        "best": best_cases(rng),
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
