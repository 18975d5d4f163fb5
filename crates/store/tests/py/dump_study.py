"""Print every study in an Optuna SQLite storage as JSON, as Optuna sees it.

Usage: python dump_study.py sqlite:///path.db
Non-finite floats are written as the strings "nan", "inf", "-inf" so that
strict JSON readers can compare them.
"""
import json
import math
import sys

import optuna


def enc(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {str(k): enc(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [enc(x) for x in v]
    return v


def main():
    url = sys.argv[1]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = {}
    for summary in optuna.get_all_study_summaries(url):
        study = optuna.load_study(storage=url, study_name=summary.study_name)
        trials = []
        for t in study.get_trials(deepcopy=False):
            trials.append(
                {
                    "number": t.number,
                    "state": t.state.name,
                    "values": enc(t.values),
                    "params": enc(t.params),
                    "distributions": {
                        k: json.loads(optuna.distributions.distribution_to_json(d))
                        for k, d in t.distributions.items()
                    },
                    "intermediate_values": enc(t.intermediate_values),
                    "user_attrs": enc(t.user_attrs),
                    "system_attrs": enc(t.system_attrs),
                    "has_start": t.datetime_start is not None,
                    "has_complete": t.datetime_complete is not None,
                }
            )
        out[summary.study_name] = {
            "directions": [d.name for d in study.directions],
            "user_attrs": enc(study.user_attrs),
            "trials": trials,
        }
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
