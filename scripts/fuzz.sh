#!/usr/bin/env bash
# Bounded libFuzzer runs for CI: builds every fuzz/ target with clang-14 under
# ASan + UBSan in build-fuzz (BUILD_DIR overrides), then runs each for a fixed
# number of executions (FUZZ_RUNS, default 20000; or FUZZ_TIME seconds each
# instead) over a scratch copy of its checked-in corpus fuzz/corpus/<target>.
# Prints each target's executions, coverage (edges, features) and corpus size;
# exits non-zero if any target crashes or breaks a property (the input is kept
# in $BUILD_DIR/fuzz-artifacts/). FUZZ_MERGE=1 merges inputs that add coverage
# back into fuzz/corpus/<target> (for a developer, never in CI).
#
#   scripts/fuzz.sh                      # CI: 20000 executions per target
#   FUZZ_TIME=600 scripts/fuzz.sh store  # a longer run of one target
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build-fuzz}
runs=${FUZZ_RUNS:-20000}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(frame body schema store image)

if [ ! -f "$dir/build.ninja" ]; then
  CC=clang-14 meson setup "$dir" -Dwerror=true -Dfuzz=enabled \
    -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
log=$(mktemp)
if ! meson compile -C "$dir" $(printf 'fuzz/fuzz-%s ' "${targets[@]}") >"$log" 2>&1; then
  tail -n 40 "$log"; rm -f "$log"; exit 1
fi
artifacts="$PWD/$dir/fuzz-artifacts"
mkdir -p "$artifacts"
failed=0
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$t/." "$work/"
  if [ -n "${FUZZ_TIME:-}" ]; then bound=(-max_total_time="$FUZZ_TIME"); else bound=(-runs="$runs"); fi
  start=$(date +%s)
  set +e
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    "$dir/fuzz/fuzz-$t" "${bound[@]}" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
      -artifact_prefix="$artifacts/$t-" "$work" >"$log" 2>&1
  rc=$?
  set -e
  secs=$(( $(date +%s) - start ))
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
  cov=$(echo "$done_line" | grep -Eo 'cov: [0-9]+' | grep -Eo '[0-9]+' || echo "?")
  ft=$(echo "$done_line" | grep -Eo 'ft: [0-9]+' | grep -Eo '[0-9]+' || echo "?")
  corp=$(echo "$done_line" | grep -Eo 'corp: [0-9]+' | grep -Eo '[0-9]+' || echo "?")
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    echo "fuzz-$t: FAILED after ${secs}s (exit $rc); the input is in $artifacts/"
    grep -E 'ERROR|SUMMARY|property|Test unit written' "$log" | head -n 20 || true
  else
    echo "fuzz-$t: $execs executions in ${secs}s, coverage $cov edges / $ft features, corpus $corp inputs (checked in: $(ls "fuzz/corpus/$t" | wc -l))"
  fi
  if [ "${FUZZ_MERGE:-0}" = 1 ] && [ "$rc" -eq 0 ]; then
    "$dir/fuzz/fuzz-$t" -merge=1 "fuzz/corpus/$t" "$work" >/dev/null 2>&1
    echo "fuzz-$t: corpus now $(ls "fuzz/corpus/$t" | wc -l) inputs"
  fi
  rm -rf "$work"
done
rm -f "$log"
echo "fuzz: ${#targets[@]} targets, $failed failed"
[ "$failed" -eq 0 ]
