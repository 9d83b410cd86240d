#!/usr/bin/env bash
# Native fuzzing of every compiled entry point (`make fuzz-native`, `make fuzz-native-short`).
#
# Input: environment: FUZZ_DIR (work folder: binaries, corpora `NAME-corpus`, artifacts),
#   FUZZ_SECONDS (per entry point) or FUZZ_TOTAL_SECONDS (shared out among them),
#   FUZZ_RUNS (libFuzzer executions per entry point, -1: no limit), PD_FUZZ_RUNS (gcc
#   fallback: mutations per entry point; default 2,000,000, or none with a time budget).
# Output: per entry point its executions, then one line `fuzz-native: N executions in S s
#   over K entry points (libfuzzer|gcc), 0 findings`; exit 1 on any finding (a sanitizer
#   report, a failed harness check, a crash, a timeout, a leak), with the input that made it
#   kept in FUZZ_DIR and named.
# Rule: with clang and its libFuzzer runtime (`make fuzzdeps` installs them with apt),
#   coverage-guided libFuzzer under address and undefined-behaviour sanitizers, seeded from
#   the samples; without them, the same harnesses under gcc's sanitizers over random
#   mutations of the same seeds (fuzz/native/*_fuzz.c: their `main`). The entry points are
#   listed once, below.
set -uo pipefail
cd "$(dirname "$0")/../.."

# name | harness and the C sources it links | seed folders (files for the gcc fallback) |
# libFuzzer options. The frame scan's inputs are capped at 16 KiB (many frames each; the
# harness rescans from every offset after a hand-back): in 10 s here, 16 KiB reached 194
# coverage edges, 2 KiB 176 (more inputs, shorter), the samples' 1 MiB 168.
TARGETS=(
  "walk|fuzz/native/walk_fuzz.c dissector/_core/walk.c|pcaps|"
  "deal|fuzz/native/deal_fuzz.c dissector/_core/deal.c dissector/_core/walk.c|pcaps|-max_len=16384"
  "frames|fuzz/native/frames_fuzz.c dissector/_core/frames.c dissector/_core/pbscan.c dissector/_core/crc32c.c|pcaps/streams pcaps|-max_len=16384"
  "recent|fuzz/native/recent_fuzz.c dissector/_core/recent.c|fuzz/native/recent-seeds pcaps/streams|-max_len=16384"
)

DIR=${FUZZ_DIR:-/tmp/pulsar-dissector-fuzz-native}
RUNS=${FUZZ_RUNS:--1}
if [ -n "${FUZZ_TOTAL_SECONDS:-}" ]; then
  SECONDS_EACH=$(( (FUZZ_TOTAL_SECONDS + ${#TARGETS[@]} - 1) / ${#TARGETS[@]} ))
else
  SECONDS_EACH=${FUZZ_SECONDS:-60}
fi
mkdir -p "$DIR"

LIBFUZZER=$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
if command -v clang >/dev/null 2>&1 && [ -f "$LIBFUZZER" ]; then
  ENGINE=libfuzzer
else
  ENGINE=gcc
fi

total=0
started=$(date +%s)
for target in "${TARGETS[@]}"; do
  IFS='|' read -r name sources seeds options <<<"$target"
  log="$DIR/$name.log"
  if [ "$ENGINE" = libfuzzer ]; then
    # shellcheck disable=SC2086  # word splitting of the source and seed lists is meant
    clang -O1 -g -DPD_LIBFUZZER -fsanitize=fuzzer,address,undefined \
      -fno-sanitize-recover=all $sources -o "$DIR/$name" || exit 1
    mkdir -p "$DIR/$name-corpus"
    # shellcheck disable=SC2086
    "$DIR/$name" -max_total_time="$SECONDS_EACH" -runs="$RUNS" -timeout=25 $options \
      -print_final_stats=1 -artifact_prefix="$DIR/$name-" "$DIR/$name-corpus" $seeds \
      >"$log" 2>&1
    status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  else
    # shellcheck disable=SC2086
    gcc -O1 -g -std=c11 -fsanitize=address,undefined -fno-sanitize-recover=all \
      $sources -o "$DIR/$name-gcc" || exit 1
    files=()
    for seed in $seeds; do
      files+=("$seed"/*.pcap "$seed"/*.bin)
    done
    if [ -z "${PD_FUZZ_RUNS:-}" ] && [ -z "${FUZZ_TOTAL_SECONDS:-}" ]; then
      export PD_FUZZ_RUNS=2000000
    fi
    PD_FUZZ_SECONDS=$SECONDS_EACH "$DIR/$name-gcc" "${files[@]}" >"$log" 2>&1
    status=$?
    runs=$(sed -n 's/.* \([0-9]*\) executions.*/\1/p' "$log" | tail -1)
  fi
  runs=${runs:-0}
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
    echo "fuzz-native: $name: FINDING (exit status $status) after $runs executions;" \
      "log $log, inputs $DIR/$name-*" >&2
    exit 1
  fi
  printf 'fuzz-native: %s: %s executions, 0 findings\n' "$name" "$runs"
  total=$((total + runs))
done
printf 'fuzz-native: %s executions in %s s over %s entry points (%s), 0 findings\n' \
  "$total" "$(($(date +%s) - started))" "${#TARGETS[@]}" "$ENGINE"
