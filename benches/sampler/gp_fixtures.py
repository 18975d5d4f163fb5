"""Writes crates/hpo-sampler/tests/fixtures/gp/optuna_fit.json: GP
hyperparameters fitted by Optuna 5.0's `optuna._gp.gp.fit_kernel_params`
(default priors, minimum noise 1e-6, from the default start) on small
recorded data sets, with the loss Optuna minimises at the fit and the
posterior mean and variance at a few query points. The Rust test
`tests/gp.rs` fits the same data and compares.

Needs torch and scipy (benches/sampler/requirements-gp.txt); run locally:
    python benches/sampler/gp_fixtures.py
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import torch

from optuna._gp import gp as gp_module
from optuna._gp import prior

OUT = pathlib.Path(__file__).resolve().parents[2] / "crates/hpo-sampler/tests/fixtures/gp/optuna_fit.json"


def case(name: str, rng: np.random.RandomState, n: int, dim: int, cat: list[bool],
         deterministic: bool, f) -> dict:
    X = rng.uniform(size=(n, dim))
    for d, c in enumerate(cat):
        if c:
            X[:, d] = rng.randint(0, 3, size=n).astype(float)
    y = np.array([f(x) for x in X])
    y = (y - y.mean()) / max(y.std(), 1e-10)
    gpr = gp_module.fit_kernel_params(
        X=X, Y=y, is_categorical=np.array(cat), log_prior=prior.default_log_prior,
        minimum_noise=prior.DEFAULT_MINIMUM_NOISE_VAR, deterministic_objective=deterministic,
        gpr_cache=None)
    with torch.no_grad():
        loss = float(-gpr.marginal_log_likelihood() - prior.default_log_prior(gpr))
    Q = rng.uniform(size=(4, dim))
    for d, c in enumerate(cat):
        if c:
            Q[:, d] = rng.randint(0, 3, size=4).astype(float)
    with torch.no_grad():
        mean, var = gpr.posterior(torch.from_numpy(Q))
    return {
        "name": name, "x": X.tolist(), "y": y.tolist(), "categorical": cat,
        "deterministic": deterministic,
        "inverse_squared_lengthscales": gpr.inverse_squared_lengthscales.tolist(),
        "kernel_scale": float(gpr.kernel_scale), "noise_var": float(gpr.noise_var),
        "loss": loss, "queries": Q.tolist(), "mean": mean.tolist(), "var": var.tolist(),
    }


def main() -> None:
    rng = np.random.RandomState(0)
    cases = [
        case("smooth_2d", rng, 12, 2, [False, False], False,
             lambda x: math.sin(3 * x[0]) + (x[1] - 0.4) ** 2),
        case("ard_4d", rng, 25, 4, [False] * 4, False,
             lambda x: 4 * (x[0] - 0.3) ** 2 + 0.1 * x[1] + math.cos(6 * x[2])),
        case("deterministic_3d", rng, 15, 3, [False] * 3, True,
             lambda x: (x[0] - 0.5) ** 2 + (x[1] - 0.2) ** 2 - x[2]),
        case("mixed_3d", rng, 20, 3, [False, True, False], False,
             lambda x: (x[0] - 0.6) ** 2 + [0.0, 0.5, -0.3][int(x[1])] + 0.2 * x[2]),
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"optuna": __import__("optuna").__version__, "cases": cases}) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
