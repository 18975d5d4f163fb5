# Hartmann6 evaluator for ask/tell shell loops (memtune or optuna CLI).
# Reads one `ask` line, {"number": N, "params": {"x0": v, ..., "x5": v}},
# and prints "N VALUE". Minimum -3.32237 at
# (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573).
# awk, not Python, so the loop measures the CLIs and not an interpreter start.
BEGIN {
    split("1.0 1.2 3.0 3.2", alpha, " ")
    split("10 3 17 3.5 1.7 8  0.05 10 17 0.1 8 14  3 3.5 1.7 10 17 8  17 8 0.05 10 0.1 14", A, " ")
    split("1312 1696 5569 124 8283 5886  2329 4135 8307 3736 1004 9991  2348 1451 3522 2883 3047 6650  4047 8828 8732 5743 1091 381", P, " ")
}
{
    line = $0
    gsub(/[{}"]/, "", line)
    n = split(line, kv, /, */)
    for (k = 1; k <= n; k++) {
        split(kv[k], pair, /: */)
        key = pair[1]; val = pair[2]
        if (key == "number") number = val + 0
        else if (key == "params") { key = pair[2]; val = pair[3] }
        if (key ~ /^x[0-5]$/) x[substr(key, 2) + 0] = val + 0
    }
    f = 0
    for (i = 0; i < 4; i++) {
        s = 0
        for (j = 0; j < 6; j++) {
            d = x[j] - P[i * 6 + j + 1] * 1e-4
            s += A[i * 6 + j + 1] * d * d
        }
        f -= alpha[i + 1] * exp(-s)
    }
    printf "%d %.10f\n", number, f
}
