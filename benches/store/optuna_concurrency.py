"""Optuna's side of `cargo xtask bench store`: N processes share one SQLite
file (or one PostgreSQL database) through optuna.storages.RDBStorage and
each runs T trials of S intermediate values, the same work as
`store-writer load`.

Usage: python optuna_concurrency.py DB_PATH|URL WORKERS TRIALS STEPS

A path is a new SQLite file (an existing one is removed first); a URL such
as postgresql://user@host:port/db names an empty database. Optuna runs with
its defaults (what users get from `sqlite:///x.db` or the URL). A lock
error ("database is locked", a deadlock, a serialization failure) raised to
the caller is counted and the call is retried, so every worker still does
all of its work. Prints one JSON line.
"""
import json
import multiprocessing as mp
import os
import sys
import time


def is_lock_error(e):
    text = str(e).lower()
    return any(word in text for word in ("locked", "busy", "deadlock", "could not serialize"))


def call(fn, counters):
    while True:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - we count and retry lock errors only
            if not is_lock_error(e):
                raise
            counters["lock_errors"] += 1
            time.sleep(0.01)


def worker(url, trials, steps, barrier, out_q):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    counters = {"lock_errors": 0}
    storage = call(lambda: optuna.storages.RDBStorage(url), counters)
    study = call(
        lambda: optuna.create_study(storage=storage, study_name="bench", load_if_exists=True),
        counters,
    )
    barrier.wait()
    start = time.time()
    for _ in range(trials):
        trial = call(study.ask, counters)
        x = call(lambda: trial.suggest_float("x", 0.0, 1.0), counters)
        for step in range(steps):
            call(lambda: trial.report(trial.number * 1000.0 + step, step), counters)
        call(lambda: study.tell(trial, trial.number + 0.25 + 0 * x), counters)
    out_q.put({"start": start, "end": time.time(), "lock_errors": counters["lock_errors"]})


def main():
    db, workers, trials, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if "://" in db:
        url = db
    else:
        if os.path.exists(db):
            os.remove(db)
        url = f"sqlite:///{db}"
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.create_study(storage=url, study_name="bench")
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers)
    out_q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(url, trials, steps, barrier, out_q)) for _ in range(workers)]
    for p in procs:
        p.start()
    results = [out_q.get() for _ in procs]
    for p in procs:
        p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)

    study = optuna.load_study(storage=url, study_name="bench")
    all_trials = study.get_trials(deepcopy=False)
    numbers = sorted(t.number for t in all_trials)
    complete = sum(1 for t in all_trials if t.state == optuna.trial.TrialState.COMPLETE)
    inter = sum(len(t.intermediate_values) for t in all_trials)
    print(
        json.dumps(
            {
                "workers_failed": len(failed),
                "seconds": wall,
                "trials": len(all_trials),
                "complete": complete,
                "intermediates": inter,
                "dense": numbers == list(range(len(numbers))),
                "lock_errors": sum(r["lock_errors"] for r in results),
                "optuna": optuna.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
