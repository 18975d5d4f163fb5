"""Read distribution JSON as Optuna does and write it back as Optuna writes it.

Usage: python read_distributions.py < lines
Each input line is one distribution in any form `json_to_distribution`
reads; each output line is `distribution_to_json` of it after Optuna's
conversion of the pre-3.0 classes to the current ones.
"""
import sys
import warnings

from optuna.distributions import (
    _convert_old_distribution_to_new_distribution,
    distribution_to_json,
    json_to_distribution,
)


def main():
    warnings.simplefilter("ignore")
    for line in sys.stdin:
        d = json_to_distribution(line)
        d = _convert_old_distribution_to_new_distribution(d, suppress_warning=True)
        print(distribution_to_json(d))


if __name__ == "__main__":
    main()
