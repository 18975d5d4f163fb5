"""Samplers on COCO's suites and multi-objective test problems, ours,
Optuna 5.0's, SMAC3's and HEBO's through the same ask/tell loop.

Ours run in `ask_tell_server` (an example of hpo-sampler, one JSON line per
ask or tell); Optuna's in this process (`study.ask(fixed_distributions)`,
`study.tell`); SMAC3's (`smac-bb`: `BlackBoxFacade`, a GP; `smac-hpo`:
`HyperparameterOptimizationFacade`, a random forest) and HEBO's (`hebo`,
its defaults) in this process too, single objective only, each told the
run's number of evaluations as their users tell them (SMAC sizes its
initial design by it). Every sampler sees the same problems, seeds and
budgets. Each library is imported only when one of its samplers runs, so
SMAC3 and HEBO can live in a venv without Optuna (for one objective).
SMAC3's runs repeat only under a fixed `PYTHONHASHSEED` (its proposals
follow the order of Python sets), which `cargo xtask bench sampler` sets.

Single objective (`--suite bbob` or `bbob-mixint`): COCO problems of the
given functions, dimensions and instances; the search space is [-5, 5]
per continuous variable and COCO's integer bounds for bbob-mixint's
integer variables. Prints
`single SUITE FUNCTION DIM INSTANCE SEED LABEL BUDGET PRECISION`: the best
f - f_opt after BUDGET = k * dim evaluations, for each k of `--budgets`.

Several objectives (`--suite multi`): ZDT1, ZDT2, ZDT3 (10-D), DTLZ2 (3
objectives, 12-D), `mixed` (2 objectives over floats, an integer and a
categorical) and COCO bbob-biobj problems (`--biobj-functions`, dims
`--dims`). Prints `multi PROBLEM SEED LABEL TRIALS HYPERVOLUME` after each
of `--checkpoints` trials (hypervolume of the points inside the problem's
reference box, computed here for every sampler alike), and with `--timing`
`timing LABEL TRIALS MEDIAN_US` for one ask + tell at that many trials.

Usage: python coco_suite.py --server PATH --suite bbob --samplers ours-tpe,optuna-tpe
       [--functions 1-24] [--dims 2,5,10] [--instances 1-5] [--seeds 1]
       [--budgets 10,20,50]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import math
import os
import subprocess
import tempfile
import time

import cocoex
import numpy as np


def ranges(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


class Ours:
    """hpo-sampler's samplers in the ask_tell_server process."""

    def __init__(self, server: str) -> None:
        self.proc = subprocess.Popen([server], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

    def call(self, msg: dict) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("ask_tell_server exited")
        return json.loads(line)

    def start(self, label: str, seed: int, directions: list[str], space: list,
              budget: int) -> None:
        self.call({"cmd": "study", "sampler": label, "seed": seed, "directions": directions,
                   "space": space})

    def ask(self) -> tuple[int, list[float]]:
        a = self.call({"cmd": "ask"})
        return a["number"], a["params"]

    def tell(self, number: int, values: list[float]) -> None:
        self.call({"cmd": "tell", "number": number, "values": values})

    def time(self, reps: int) -> float:
        return self.call({"cmd": "time", "reps": reps})["median_us"]


def optuna_sampler(label: str, seed: int):
    import optuna

    if label == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if label == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if label == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if label == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(label)


class Theirs:
    """Optuna's samplers on an in-memory study."""

    def start(self, label: str, seed: int, directions: list[str], space: list,
              budget: int) -> None:
        import optuna
        from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                          IntDistribution)

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        self.study = optuna.create_study(directions=directions,
                                         sampler=optuna_sampler(label, seed))
        self.names = [p[0] for p in space]
        self.dists = {}
        for name, kind, lo, hi in space:
            if kind == "float":
                self.dists[name] = FloatDistribution(lo, hi)
            elif kind == "int":
                self.dists[name] = IntDistribution(int(lo), int(hi))
            else:
                self.dists[name] = CategoricalDistribution(list(range(int(lo), int(hi) + 1)))
        self.trials = {}

    def ask(self) -> tuple[int, list[float]]:
        t = self.study.ask(self.dists)
        self.trials[t.number] = t
        return t.number, [float(t.params[n]) for n in self.names]

    def tell(self, number: int, values: list[float]) -> None:
        self.study.tell(self.trials.pop(number), values)

    def time(self, reps: int) -> float:
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            t = self.study.ask(self.dists)
            values = self.study.trials[-2].values
            self.study.tell(t, values)
            samples.append((time.perf_counter() - start) * 1e6)
        return sorted(samples)[len(samples) // 2]


class Peer:
    """A peer library in this process, on one minimised objective: numbers
    its asks and keeps what each returned until it is told."""

    def begin(self, name: str, directions: list[str], space: list) -> None:
        if directions != ["minimize"]:
            raise ValueError(f"{name} runs here on one minimised objective")
        self.names = [p[0] for p in space]
        self.pending: dict = {}
        self.asked = 0

    def hold(self, asked) -> int:
        """The trial number of an ask, and `asked` kept for its tell."""
        number = self.asked
        self.asked += 1
        self.pending[number] = asked
        return number


class Smac(Peer):
    """SMAC3 2.4's facades through `ask` / `tell`."""

    def start(self, label: str, seed: int, directions: list[str], space: list,
              budget: int) -> None:
        from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer
        from smac import BlackBoxFacade, HyperparameterOptimizationFacade, Scenario

        self.begin("SMAC3", directions, space)
        facade = {"bb": BlackBoxFacade, "hpo": HyperparameterOptimizationFacade}[label]
        cs = ConfigurationSpace(seed=seed)
        for name, kind, lo, hi in space:
            if kind == "float":
                cs.add(Float(name, (lo, hi)))
            elif kind == "int":
                cs.add(Integer(name, (int(lo), int(hi))))
            else:
                cs.add(Categorical(name, list(range(int(lo), int(hi) + 1))))
        # SMAC writes its run history under the output directory.
        self.out = tempfile.TemporaryDirectory(prefix="smac-")
        scenario = Scenario(cs, deterministic=True, n_trials=budget, seed=seed,
                            output_directory=self.out.name)
        self.smac = facade(scenario, target_function=lambda config, seed=0: 0.0,
                           overwrite=True, logging_level=40)

    def ask(self) -> tuple[int, list[float]]:
        info = self.smac.ask()
        return self.hold(info), [float(info.config[n]) for n in self.names]

    def tell(self, number: int, values: list[float]) -> None:
        from smac.runhistory.dataclasses import TrialValue

        self.smac.tell(self.pending.pop(number), TrialValue(cost=values[0]))


class Hebo(Peer):
    """HEBO 0.3.6 with its defaults through `suggest` / `observe`."""

    def start(self, label: str, seed: int, directions: list[str], space: list,
              budget: int) -> None:
        import torch
        from hebo.design_space.design_space import DesignSpace
        from hebo.optimizers.hebo import HEBO

        self.begin("HEBO", directions, space)
        params = []
        for name, kind, lo, hi in space:
            if kind == "float":
                params.append({"name": name, "type": "num", "lb": lo, "ub": hi})
            elif kind == "int":
                params.append({"name": name, "type": "int", "lb": int(lo), "ub": int(hi)})
            else:
                params.append({"name": name, "type": "cat",
                               "categories": list(range(int(lo), int(hi) + 1))})
        # HEBO draws from the global generators besides its own scrambled
        # initial design.
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.opt = HEBO(DesignSpace().parse(params), scramble_seed=seed)

    def ask(self) -> tuple[int, list[float]]:
        # HEBO prints its GP's jitter to stdout, where our lines go.
        with contextlib.redirect_stdout(io.StringIO()):
            rec = self.opt.suggest(n_suggestions=1)
        return self.hold(rec), [float(rec.iloc[0][n]) for n in self.names]

    def tell(self, number: int, values: list[float]) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            self.opt.observe(self.pending.pop(number), np.array([[values[0]]]))


def driver(label: str, ours: Ours | None):
    if label == "hebo":
        return Hebo(), "hebo"
    side, name = label.split("-", 1)
    if side == "ours":
        return ours, name
    if side == "smac":
        return Smac(), name
    if side == "optuna":
        return Theirs(), name
    raise ValueError(f"unknown sampler {label}")


# --- single objective -------------------------------------------------------


def coco_space(problem) -> list:
    n_int = problem.number_of_integer_variables
    space = []
    for i in range(problem.dimension):
        if i < n_int:
            space.append([f"x{i:02d}", "int", float(problem.lower_bounds[i]),
                          float(problem.upper_bounds[i])])
        else:
            space.append([f"x{i:02d}", "float", -5.0, 5.0])
    return space


def f_opt(problem, workdir: str) -> float:
    """f at COCO's recorded optimum (written to a file by `_best_parameter`)."""
    here = os.getcwd()
    os.chdir(workdir)
    try:
        problem._best_parameter("print")
        x = np.atleast_1d(np.loadtxt("._bbob_problem_best_parameter.txt"))
    finally:
        os.chdir(here)
    return float(problem(x))


def run_single(args, samplers: list[str], ours: Ours | None) -> None:
    budgets = [int(b) for b in args.budgets.split(",")]
    options = (f"function_indices:{args.functions} dimensions:{args.dims} "
               f"instance_indices:{args.instances}")
    suite = cocoex.Suite(args.suite, "", options)
    workdir = tempfile.mkdtemp(prefix="coco-")
    for problem in suite:
        fo = f_opt(problem, workdir)
        d = problem.dimension
        space = coco_space(problem)
        n = max(budgets) * d
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for label in samplers:
                if label.endswith("gp") and max(budgets) * d > args.gp_max_trials:
                    n_here = max([b * d for b in budgets if b * d <= args.gp_max_trials],
                                 default=0)
                else:
                    n_here = n
                if n_here == 0:
                    continue
                drv, name = driver(label, ours)
                drv.start(name, seed, ["minimize"], space, n_here)
                best = math.inf
                for i in range(1, n_here + 1):
                    number, x = drv.ask()
                    y = float(problem(np.asarray(x)))
                    drv.tell(number, [y])
                    best = min(best, y)
                    if i % d == 0 and i // d in budgets:
                        print(f"single {args.suite} {problem.id_function} {d} "
                              f"{problem.id_instance} {seed} {label} {i // d} "
                              f"{max(best - fo, 0.0):.10g}", flush=True)


# --- several objectives -----------------------------------------------------


def zdt(kind: int):
    def f(x):
        x = np.asarray(x)
        g = 1.0 + 9.0 * np.mean(x[1:])
        f1 = x[0]
        if kind == 1:
            h = 1.0 - math.sqrt(f1 / g)
        elif kind == 2:
            h = 1.0 - (f1 / g) ** 2
        else:
            h = 1.0 - math.sqrt(f1 / g) - (f1 / g) * math.sin(10.0 * math.pi * f1)
        return [f1, g * h]
    return f


def dtlz2(x):
    x = np.asarray(x)
    m = 3
    g = float(np.sum((x[m - 1:] - 0.5) ** 2))
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b),
            (1 + g) * math.sin(a)]


MIXED_OPT = [0.4, 0.0, 0.8]


def mixed(x):
    """Two objectives over 3 floats in [0, 1], an integer in [0, 10] and a
    categorical of 3 choices: a convex front in (x0, the rest at their
    optimum), shifted by the categorical's cost."""
    f0, f1, f2, k, c = x
    g = 1.0 + (f1 - 0.3) ** 2 + (f2 - 0.7) ** 2 + ((k - 6) / 5.0) ** 2 + MIXED_OPT[int(c)]
    return [f0 * g, (1.0 - f0 ** 2) * g + 0.1 * abs(k - 4)]


KEPT_SUITES: list = []


def named_problems(args) -> list:
    unit = lambda n: [[f"x{i:02d}", "float", 0.0, 1.0] for i in range(n)]  # noqa: E731
    problems = [
        ("zdt1", zdt(1), unit(10), ["minimize"] * 2, [11.0, 11.0]),
        ("zdt2", zdt(2), unit(10), ["minimize"] * 2, [11.0, 11.0]),
        ("zdt3", zdt(3), unit(10), ["minimize"] * 2, [11.0, 11.0]),
        ("dtlz2", dtlz2, unit(12), ["minimize"] * 3, [2.5, 2.5, 2.5]),
        ("mixed", mixed, unit(3) + [["k", "int", 0, 10], ["c", "categorical", 0, 2]],
         ["minimize"] * 2, [3.0, 4.0]),
    ]
    wanted = args.problems.split(",")
    problems = [p for p in problems if p[0] in wanted]
    if "biobj" in wanted:
        suite = cocoex.Suite("bbob-biobj", "", f"function_indices:{args.biobj_functions} "
                             f"dimensions:{args.dims} instance_indices:{args.instances}")
        # A suite frees its problems when it goes.
        KEPT_SUITES.append(suite)
        # The suite's iterator frees each problem when it moves on: keep
        # ids, and get each problem again when it runs.
        ids = [(p.id, p.dimension, [float(v) for v in p.largest_fvalues_of_interest])
               for p in suite]
        for pid, dim, reference in ids:
            space = [[f"x{i:02d}", "float", -5.0, 5.0] for i in range(dim)]
            problems.append((pid, (suite, pid), space, ["minimize"] * 2, reference))
    return problems


def run_multi(args, samplers: list[str], ours: Ours | None) -> None:
    from optuna._hypervolume import compute_hypervolume

    checkpoints = [int(c) for c in args.checkpoints.split(",")]
    for name, f, space, directions, reference in named_problems(args):
        if isinstance(f, tuple):
            f = f[0].get_problem(f[1])
        ref = np.asarray(reference)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for label in samplers:
                drv, sampler = driver(label, ours)
                drv.start(sampler, seed, directions, space, max(checkpoints))
                points = []
                for i in range(1, max(checkpoints) + 1):
                    number, x = drv.ask()
                    y = [float(v) for v in f(np.asarray(x))]
                    drv.tell(number, y)
                    if all(a <= b for a, b in zip(y, reference)):
                        points.append(y)
                    if i in checkpoints:
                        hv = compute_hypervolume(np.asarray(points), ref) if points else 0.0
                        print(f"multi {name} {seed} {label} {i} {hv:.10g}", flush=True)
    if args.timing:
        # One ask + tell at `timing` trials of ZDT1 (2 objectives, 10 params).
        name, f, space, directions, _ = named_problems(
            argparse.Namespace(**{**vars(args), "problems": "zdt1"}))[0]
        for label in samplers:
            drv, sampler = driver(label, ours)
            drv.start(sampler, 0, directions, space, args.timing + args.reps)
            rng = np.random.RandomState(0)
            for _ in range(args.timing):
                number, _ = drv.ask()
                drv.tell(number, [float(v) for v in f(rng.rand(10))])
            print(f"timing {label} {args.timing} {drv.time(args.reps):.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", help="path of the ask_tell_server example")
    ap.add_argument("--suite", default="bbob", choices=["bbob", "bbob-mixint", "multi"])
    ap.add_argument("--samplers", default="ours-tpe,optuna-tpe")
    ap.add_argument("--functions", default="1-24")
    ap.add_argument("--dims", default="2,5,10")
    ap.add_argument("--instances", default="1-5")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--budgets", default="10,20,50")
    ap.add_argument("--gp-max-trials", type=int, default=100,
                    help="GP samplers stop at the largest budget within this many trials")
    ap.add_argument("--problems", default="zdt1,zdt2,zdt3,dtlz2,mixed,biobj")
    ap.add_argument("--biobj-functions", default="1-55")
    ap.add_argument("--checkpoints", default="100,300")
    ap.add_argument("--timing", type=int, default=0)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    samplers = args.samplers.split(",")
    ours = Ours(args.server) if any(s.startswith("ours-") for s in samplers) else None
    for package, prefix in [("optuna", "optuna-"), ("smac", "smac-"), ("HEBO", "hebo")]:
        if any(s.startswith(prefix) for s in samplers):
            print(f"version {package} {importlib.metadata.version(package)}", flush=True)
    print(f"version coco {cocoex.__version__}", flush=True)
    if args.suite == "multi":
        run_multi(args, samplers, ours)
    else:
        run_single(args, samplers, ours)


if __name__ == "__main__":
    main()
