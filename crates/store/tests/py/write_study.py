"""Write studies with Optuna itself, for the store to read back.

Usage: python write_study.py sqlite:///path.db
"""
import sys

import optuna


def main():
    url = sys.argv[1]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=url, study_name="optuna-single", direction="maximize")
    study.set_user_attr("dataset", "sst2")
    for i in range(4):
        t = study.ask()
        lr = t.suggest_float("lr", 1e-5, 1e-1, log=True)
        bs = t.suggest_int("batch_size", 8, 64, step=8)
        opt = t.suggest_categorical("optimizer", ["adam", "sgd", None])
        t.suggest_float("dropout", 0.0, 0.5, step=0.1)
        t.set_user_attr("peak_mb", 100 + i)
        for step in range(3):
            t.report(lr * (step + 1), step)
        if i == 1:
            t.report(float("nan"), 3)
            t.report(float("inf"), 4)
            study.tell(t, state=optuna.trial.TrialState.PRUNED)
        elif i == 2:
            t.set_user_attr("oom", True)
            study.tell(t, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(t, bs / 64.0 + (0.5 if opt == "adam" else 0.0))
    study.enqueue_trial({"lr": 0.001, "batch_size": 16})
    study.ask()  # RUNNING, left unfinished
    study.enqueue_trial({"lr": 0.002})  # stays WAITING

    multi = optuna.create_study(
        storage=url, study_name="optuna-multi", directions=["minimize", "maximize"]
    )
    multi.optimize(
        lambda t: (t.suggest_int("layers", 1, 6), float("-inf") if t.number == 0 else 1.0 * t.number),
        n_trials=3,
    )


if __name__ == "__main__":
    main()
