"""Record Optuna 5.0's Parzen estimator densities on fixed observations.

For each case, builds ``optuna.samplers._tpe.parzen_estimator._ParzenEstimator``
with TPESampler's default parameters (prior weight 1, magic clip, no
endpoints, default weights) over a search space and observations, and
records ``log_pdf`` at fixed points. The Rust test
``tests/parzen_fixtures.rs`` rebuilds our estimator from the same inputs
and must match every density (kernel placement, widths, weights, prior,
truncation, step and log handling, categorical smoothing), except in cases
flagged ``ties_matter`` (see below), which it checks only for finiteness.

Usage (from the repository root):
    $MEMTUNE_PYTHON benches/sampler/parzen_fixtures.py [OUT_FILE]
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.distributions import distribution_to_json
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.sampler import default_weights

PARAMS = _ParzenEstimatorParameters(
    prior_weight=1.0, consider_magic_clip=True, consider_endpoints=False,
    weights=default_weights, multivariate=True)


def grid(dist, n: int) -> list:
    if isinstance(dist, CategoricalDistribution):
        return [float(i % len(dist.choices)) for i in range(n)]
    if isinstance(dist, IntDistribution):
        values = list(range(dist.low, dist.high + 1, dist.step))
        return [float(values[(i * 7) % len(values)]) for i in range(n)]
    if dist.step is not None:
        k = int(round((dist.high - dist.low) / dist.step))
        return [dist.low + ((i * 5) % (k + 1)) * dist.step for i in range(n)]
    if dist.log:
        lo, hi = np.log(dist.low), np.log(dist.high)
        return [float(np.exp(lo + (hi - lo) * (i + 0.5) / n)) for i in range(n)]
    return [dist.low + (dist.high - dist.low) * (i + 0.5) / n for i in range(n)]


def observations(dist, n: int, rng: np.random.RandomState) -> list:
    if isinstance(dist, CategoricalDistribution):
        return [float(rng.randint(len(dist.choices))) for _ in range(n)]
    if isinstance(dist, IntDistribution):
        values = list(range(dist.low, dist.high + 1, dist.step))
        if dist.log:
            return [float(min(dist.high, max(dist.low, round(np.exp(rng.uniform(0, np.log(dist.high)))))))
                    for _ in range(n)]
        return [float(values[rng.randint(len(values))]) for _ in range(n)]
    if dist.step is not None:
        k = int(round((dist.high - dist.low) / dist.step))
        return [dist.low + rng.randint(k + 1) * dist.step for _ in range(n)]
    if dist.log:
        return [float(np.exp(rng.uniform(np.log(dist.low), np.log(dist.high)))) for _ in range(n)]
    # Clustered, to exercise the kernel widths.
    centre = rng.uniform(dist.low, dist.high)
    return [float(np.clip(rng.normal(centre, (dist.high - dist.low) / 6), dist.low, dist.high))
            for _ in range(n)]


SPACES = {
    "float": {"x": FloatDistribution(-2.0, 3.0)},
    "float_log": {"lr": FloatDistribution(1e-5, 1e-1, log=True)},
    "float_step": {"q": FloatDistribution(0.0, 1.0, step=0.125)},
    "int_step": {"bs": IntDistribution(16, 256, step=16)},
    "int_log": {"w": IntDistribution(1, 1000, log=True)},
    "categorical": {"c": CategoricalDistribution(["a", "b", None, 3])},
    "mixed": {
        "lr": FloatDistribution(1e-5, 1e-1, log=True),
        "wd": FloatDistribution(0.0, 0.3),
        "bs": IntDistribution(16, 256, step=16),
        "w": IntDistribution(1, 1000, log=True),
        "opt": CategoricalDistribution(["adam", "sgd", "adamw"]),
    },
}


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        "crates", "hpo-sampler", "tests", "fixtures", "parzen", "optuna_parzen.json")
    rng = np.random.RandomState(42)
    cases = []
    for name, space in SPACES.items():
        for n_obs in (0, 1, 3, 24, 60):
            obs = {k: observations(d, n_obs, rng) for k, d in space.items()}
            pe = _ParzenEstimator({k: np.asarray(v, dtype=float) for k, v in obs.items()},
                                  space, PARAMS)
            points = {k: grid(d, 17) for k, d in space.items()}
            log_pdf = pe.log_pdf({k: np.asarray(v, dtype=float) for k, v in points.items()})
            # Which of several equal observations gets which kernel width
            # follows numpy's unstable argsort (machine-dependent SIMD sort),
            # and matters once kernels differ in weight (> 25 observations)
            # or pair up with other dimensions: such cases are recorded but
            # flagged, as no other implementation can match them exactly.
            numeric = [k for k, d in space.items() if not isinstance(d, CategoricalDistribution)]
            has_ties = any(len(set(obs[k])) < len(obs[k]) for k in numeric)
            ties_matter = has_ties and (len(space) > 1 or n_obs > 25)
            cases.append({
                "name": f"{name}_{n_obs}",
                "ties_matter": ties_matter,
                "space": {k: json.loads(distribution_to_json(d)) for k, d in space.items()},
                "order": list(space.keys()),
                "observations": obs,
                "points": points,
                "log_pdf": [float(v) for v in log_pdf],
            })
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"optuna_version": optuna.__version__, "cases": cases}, f,
                  separators=(",", ":"), allow_nan=False)
        f.write("\n")
    print(f"{out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
