#!/usr/bin/env bash
# Runs every test: the C suites in the normal build and again under AddressSanitizer
# + UndefinedBehaviorSanitizer, and the quick benchmark run (which proves the
# benchmarks still work; it asserts nothing about speed). Installs what is missing
# first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

passed=0
failed=0
run_suite() { # $1 = build dir, rest = meson test args
  local dir=$1; shift
  local log
  log=$(mktemp)
  set +e
  meson test -C "$dir" --print-errorlogs "$@" 2>&1 | tee "$log" | grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Expected Fail|Unexpected Pass|Skipped|Timeout):' 
  local rc=${PIPESTATUS[0]}
  set -e
  local ok fl to
  ok=$(awk '/^Ok:/ {print $2}' "$log"); fl=$(awk '/^Fail:/ {print $2}' "$log"); to=$(awk '/^Timeout:/ {print $2}' "$log")
  passed=$((passed + ${ok:-0})); failed=$((failed + ${fl:-0} + ${to:-0}))
  if [ "$rc" -ne 0 ]; then
    sed -n '/^=* *[0-9]*\/[0-9]* .*FAIL/,$p' "$log" | tail -n 200
    failed=$((failed > 0 ? failed : 1))
  fi
  rm -f "$log"
}

echo "== C suites (debugoptimized build)"
run_suite build

echo "== C suites (ASan + UBSan)"
if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
meson compile -C build-asan >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  run_suite build-asan

run_script() { # $1 = label, rest = command; one pass or one failure
  local label=$1; shift
  local out
  out=$(mktemp)
  if "$@" >"$out" 2>&1; then
    passed=$((passed + 1)); echo "$label: ok"; tail -n 8 "$out"
  else
    failed=$((failed + 1)); echo "$label: FAILED"; tail -n 40 "$out"
  fi
  rm -f "$out"
}

echo "== kill points (a -Dkillpoints=true build: recovery at every numbered point)"
run_script "scripts/killpoints.sh" bash scripts/killpoints.sh

echo "== fuzzers (libFuzzer, bounded executions per target)"
run_script "scripts/fuzz.sh" bash scripts/fuzz.sh

# pytest in a process of its own per group: `-rfEs` names every failure, error and
# skip in the summary. JAX starts threads when it is imported, and a process that
# forks beside them may deadlock, so test_jax.py (which imports jax) runs alone,
# after the others.
run_pytest() { # $1 = label, rest = pytest arguments
  local label=$1; shift
  local pylog pyrc py_passed py_failed
  echo "== $label"
  pylog=$(mktemp)
  set +e
  ZRECORDD="$PWD/build/daemon/zrecordd" ZR_BUILD="$PWD/build" \
    python3 -m pytest -q -rfEs -p no:cacheprovider "$@" 2>&1 | tee "$pylog" | tail -n 25
  pyrc=${PIPESTATUS[0]}
  set -e
  if grep -qE '^(FAILED|ERROR) ' "$pylog"; then  # named even when skips fill the tail
    echo "-- failed or in error:"; grep -E '^(FAILED|ERROR) ' "$pylog"
  fi
  py_passed=$(grep -Eo '[0-9]+ passed' "$pylog" | tail -1 | grep -Eo '[0-9]+' || true)
  py_failed=$(tail -n 3 "$pylog" | { grep -Eo '[0-9]+ (failed|errors?)' || true; } | awk '{s += $1} END {print s + 0}')
  passed=$((passed + ${py_passed:-0}))
  failed=$((failed + ${py_failed:-0}))
  if [ "$pyrc" -ne 0 ] && [ "${py_failed:-0}" -eq 0 ]; then failed=$((failed + 1)); fi
  rm -f "$pylog"
}
run_pytest "Python client, service and security tests (pytest, against the built daemon)" \
  --ignore=python-client/tests/test_jax.py python-client/tests tests/systemd tests/security
run_pytest "JAX (pytest in a process of its own: jax's threads beside no fork of another test)" \
  python-client/tests/test_jax.py

echo "== mypy: loaderx's annotations, and a user's code against them (python-client/pyproject.toml)"
run_script "mypy" bash -c "cd python-client && python3 -m mypy"

echo "== the loaderx wheel: sdist, wheel, auditwheel, a fresh venv, the examples there (PyPI)"
run_script "scripts/wheel.sh" bash scripts/wheel.sh

echo "== loaderx 1.5.7: its own test suite against python-client, interop with it (PyPI)"
run_script "scripts/loaderx157-suite.sh" bash scripts/loaderx157-suite.sh build

echo "== benchmarks, quick runs (they prove the benchmarks run; no speed assertions)"
for b in "build/bench/store-bench --quick" "build/bench/sampler-bench --reps 11" \
         "python3 bench/run.py all --quick --build build --no-plots"; do
  if $b >/tmp/zr-bench-quick.txt 2>&1; then
    passed=$((passed + 1)); echo "$b: ok"
  else
    failed=$((failed + 1)); echo "$b: FAILED"; tail -n 20 /tmp/zr-bench-quick.txt
  fi
done

echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
