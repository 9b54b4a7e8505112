#!/usr/bin/env bash
# `make demo`: data -> instrumented run -> analysis -> short tune -> findings, on a fresh machine.
# Stages whose subcommand is not built yet are reported as skipped, never faked.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DEMO_OUT:-$PWD/demo-out}
RA=.venv/bin/recadvisor
export RECADVISOR_CACHE="$OUT/cache"
mkdir -p "$OUT"
T0=$(date +%s)

stage() { printf '\n\033[1m==> [%s] %s\033[0m\n' "$(date +%H:%M:%S)" "$*"; }
has() { "$RA" "$1" --help >/dev/null 2>&1; }
skip() { printf '    skipped: `recadvisor %s` is not built yet (%s)\n' "$1" "$2"; }

stage "1/5 data: synthetic Criteo-like dataset (per-example GZIP records, as seed 000's job had)"
if [ -f "$OUT/data/manifest.json" ]; then
  echo "    reusing $OUT/data"
else
  "$RA" data --out "$OUT/data" --format example --compression gzip
fi

stage "2/5 train: the 'default' preset (seed 000's starting job) under the profiler"
"$RA" train --preset default --data "$OUT/data" --logdir "$OUT/logdir/default" | tee "$OUT/default.txt"

stage "3/5 analyze: root causes in the profile"
if has analyze; then
  "$RA" analyze "$OUT/logdir/default" | tee "$OUT/findings.txt"
else
  skip analyze "analyzers, issue 5"
fi

stage "4/5 tune: short guided search from the findings (each trial measured in its own process)"
if has tune; then
  tune() {
    "$RA" tune --preset default --trials 10 --remeasure 1 --top-k 2 --out "$OUT/tune" "$@" \
      2> >(tee "$OUT/tune.err" >&2) | tee "$OUT/tune.txt"
  }
  # --resume: a second `make demo` continues (or just re-reports) the same study. A study left
  # by an older checkout, whose `default` preset has changed since, is kept aside, not lost.
  if ! tune --resume; then
    if grep -q "different configuration" "$OUT/tune.err"; then
      old="$OUT/tune.before-$(date +%Y%m%d-%H%M%S)"
      mv "$OUT/tune" "$old"
      echo "    the study in $OUT/tune started from an older 'default' preset: moved to $old"
      tune
    else
      exit 1
    fi
  fi
else
  skip tune "tuner, issue 6"
fi

stage "5/5 results"
echo "    everything is under $OUT:"
echo "      dataset      $OUT/data"
echo "      profile      $OUT/logdir/default  (TensorBoard: .venv/bin/tensorboard --logdir $OUT/logdir)"
has analyze && echo "      findings     $OUT/findings.txt"
has tune && echo "      tuning       $OUT/tune  (summary.json, best_config.json, best_command.txt, trials.csv)"
if has tune && [ -f "$OUT/tune/best_command.txt" ]; then
  echo "    the tuned job:    $(cat "$OUT/tune/best_command.txt")"
  echo "    compare profiles: recadvisor train --config $OUT/tune/best_config.json --logdir $OUT/logdir/tuned"
  echo "                      recadvisor diff $OUT/logdir/default $OUT/logdir/tuned"
fi
if has dashboard; then
  echo "    open the dashboard: .venv/bin/recadvisor dashboard --root $OUT   (http://127.0.0.1:8501)"
fi
echo "    demo took $(( $(date +%s) - T0 )) s"
