#!/usr/bin/env bash
# Drive `ask`/`tell` in a shell loop on Hartmann6 (6 floats in [0, 1],
# minimum -3.32237) and print, per seed, the best value after N trials,
# whether it is within 0.15 of the optimum, and the time per ask+tell.
#
# The same loop runs on memtune or on Optuna's own CLI (same words, same
# JSON), which is the point: a script written for one runs on the other.
#
#   benches/sampler/ask_tell_hartmann6.sh [SEEDS] [TRIALS]
#   CLI=optuna OPTUNA=target/memtune-cache/venv/bin/optuna benches/sampler/ask_tell_hartmann6.sh 2
#
# Env: CLI=memtune|optuna (default memtune); MEMTUNE=path of the binary
# (default target/release/memtune); OPTUNA=path of the optuna CLI;
# EXTRA_KWARGS=', "constant_liar": false' appends memtune sampler options.
# memtune gets `--sampler TPESampler --sampler-kwargs '{"seed": S}'`; Optuna
# gets no --sampler (its default TPESampler, unseeded), because a seeded
# TPESampler rebuilt in every `optuna ask` process draws the same startup
# point every time.
set -euo pipefail

SEEDS=${1:-10}
TRIALS=${2:-100}
CLI=${CLI:-memtune}
HERE=$(cd "$(dirname "$0")" && pwd)
EVAL="$HERE/hartmann6.awk"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

SPACE='{'
for j in 0 1 2 3 4 5; do
    [ "$j" -gt 0 ] && SPACE+=', '
    SPACE+="\"x$j\": {\"name\": \"FloatDistribution\", \"attributes\": {\"low\": 0.0, \"high\": 1.0, \"log\": false, \"step\": null}}"
done
SPACE+='}'

case "$CLI" in
memtune) BIN=(${MEMTUNE:-target/release/memtune}) ;;
optuna) BIN=(${OPTUNA:-optuna}) ;;
*) echo "CLI must be memtune or optuna" >&2; exit 2 ;;
esac

printf '%-5s %-12s %-8s %-8s %s\n' seed best within trials ms_per_ask_tell
ok=0
for seed in $(seq 1 "$SEEDS"); do
    db="sqlite:///$WORK/h6-$seed.db"
    "${BIN[@]}" create-study --storage "$db" --study-name h6 --direction minimize >/dev/null 2>&1
    if [ "$CLI" = memtune ]; then
        SAMPLER=(--sampler TPESampler --sampler-kwargs "{\"seed\": $seed${EXTRA_KWARGS:-}}")
    else
        SAMPLER=()
    fi
    best=inf
    start=$(date +%s.%N)
    for _ in $(seq 1 "$TRIALS"); do
        asked=$("${BIN[@]}" ask --storage "$db" --study-name h6 --search-space "$SPACE" "${SAMPLER[@]}" 2>/dev/null)
        read -r number value < <(echo "$asked" | awk -f "$EVAL")
        "${BIN[@]}" tell --storage "$db" --study-name h6 --trial-number "$number" --values "$value" 2>/dev/null
        best=$(awk -v b="$best" -v v="$value" 'BEGIN { print (b == "inf" || v + 0 < b + 0) ? v : b }')
    done
    end=$(date +%s.%N)
    within=$(awk -v b="$best" 'BEGIN { print (b + 0 <= -3.32237 + 0.15) ? "yes" : "no" }')
    [ "$within" = yes ] && ok=$((ok + 1))
    ms=$(awk -v s="$start" -v e="$end" -v n="$TRIALS" 'BEGIN { printf "%.1f", (e - s) * 1000 / n }')
    printf '%-5s %-12s %-8s %-8s %s\n' "$seed" "$best" "$within" "$TRIALS" "$ms"
done
echo "$CLI: $ok of $SEEDS seeds within 0.15 of -3.32237 after $TRIALS trials"
