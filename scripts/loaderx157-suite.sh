#!/usr/bin/env bash
# loaderx157-suite.sh [BUILD]: zrecord as a drop-in for PyPI loaderx 1.5.7.
#
# 1. loaderx 1.5.7's own test suite: its sdist is fetched with pip, and its
#    tests/test_loaderx.py runs unmodified against python-client and BUILD's
#    daemon (one zrecordd for the session, tests/compat/lx157_plugin.py). At least
#    34 of its 35 tests must pass, and only the tests named in ALLOWED may fail:
#    each exercises a deliberate difference of python-client/README.md's table.
# 2. Interop with loaderx 1.5.7 itself, installed from PyPI in a venv of its own
#    (its import name is ours): python-client/tests/test_lx157_interop.py and
#    the compat suite of BUILD (test-lx157 with that venv's loaderx).
# BUILD is a meson build directory (default: build). Needs network access to PyPI.
# Prints "N passed, M failed" (the two parts' tests) and exits 0 when all held.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repo=$PWD
LX_VERSION=1.5.7
LX_TESTS=35
LX_MIN_PASSED=34
# The tests of loaderx 1.5.7's suite allowed to fail, each a listed difference:
ALLOWED="test_train_dict_standalone_and_consistent"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== loaderx $LX_VERSION's own test suite, against python-client and $build/daemon/zrecordd"
python3 -m pip download -q --no-deps --no-binary :all: -d "$work/sdist" "loaderx==$LX_VERSION"
tar -xzf "$work/sdist/loaderx-$LX_VERSION.tar.gz" -C "$work"
mkdir "$work/suite"
cp "$work/loaderx-$LX_VERSION/tests/test_loaderx.py" "$work/suite/"
set +e
(cd "$work/suite" && PYTHONPATH="$repo/python-client:$repo/tests/compat" \
  ZRECORDD="$repo/$build/daemon/zrecordd" \
  python3 -m pytest -q -rf -p no:cacheprovider -p lx157_plugin test_loaderx.py) \
  >"$work/suite.log" 2>&1
set -e
tail -n 15 "$work/suite.log"
passed=$(grep -Eo '[0-9]+ passed' "$work/suite.log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
failed_names=$(sed -n 's/^FAILED test_loaderx.py::\([A-Za-z0-9_]*\).*/\1/p' "$work/suite.log")
errors=$(grep -Eo '[0-9]+ error' "$work/suite.log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
ok=1
for t in $failed_names; do
  case " $ALLOWED " in
    *" $t "*) echo "allowed failure (a listed difference): $t" ;;
    *) echo "FAILED, and not a listed difference: $t"; ok=0 ;;
  esac
done
nfailed=$(echo "$failed_names" | grep -c . || true)
if [ "$passed" -lt "$LX_MIN_PASSED" ] || [ "$((passed + nfailed))" -ne "$LX_TESTS" ] \
   || [ "$errors" -ne 0 ]; then
  echo "loaderx $LX_VERSION's suite: $passed passed, $nfailed failed, $errors errors;" \
       "need >= $LX_MIN_PASSED of $LX_TESTS passing"
  ok=0
fi
suite_passed=$passed
suite_failed=$(( ok ? 0 : 1 ))

echo "== interop with PyPI loaderx $LX_VERSION in a venv of its own"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "loaderx==$LX_VERSION" numpy
set +e
ZR_LX157_PYTHON="$work/venv/bin/python" ZR_LX157_REQUIRED=1 \
  ZRECORDD="$repo/$build/daemon/zrecordd" ZR_BUILD="$repo/$build" \
  python3 -m pytest -q -p no:cacheprovider python-client/tests/test_lx157_interop.py \
  >"$work/interop.log" 2>&1
interop_rc=$?
ZR_LX157_PYTHON="$work/venv/bin/python" meson test -C "$build" --suite compat --print-errorlogs \
  >"$work/compat.log" 2>&1
compat_rc=$?
set -e
tail -n 5 "$work/interop.log"
grep -E 'lx157|^Ok:|^Fail:' "$work/compat.log" | tail -n 4
grep -q 'fixtures written by loaderx 1.5.7' "$build/meson-logs/testlog.txt" || {
  echo "test-lx157 did not use loaderx $LX_VERSION's own fixtures"; compat_rc=1; }
interop_passed=$(grep -Eo '[0-9]+ passed' "$work/interop.log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
[ "$interop_rc" -eq 0 ] || tail -n 40 "$work/interop.log"
[ "$compat_rc" -eq 0 ] || tail -n 40 "$work/compat.log"

passed_all=$((suite_passed + interop_passed + (compat_rc == 0 ? 1 : 0)))
failed_all=$((suite_failed + (interop_rc != 0 ? 1 : 0) + (compat_rc != 0 ? 1 : 0)))
echo "$passed_all passed, $failed_all failed"
[ "$failed_all" -eq 0 ]
