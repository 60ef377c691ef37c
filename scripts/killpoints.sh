#!/usr/bin/env bash
# Kill points: builds the engine with -Dkillpoints=true (under ASan + UBSan) in
# build-killpoints and runs tests/store/test-killpoints: a child per numbered
# point of append, delete, header update, sync, compaction and dictionary
# install, SIGKILLed there, and the store it leaves reopened and checked.
# ZR_KILLPOINT_HITS (default 3) sets how many hits of each point are tried; the
# nightly size is ZR_KILLPOINT_HITS=1000 (every hit). BUILD_DIR overrides the
# build directory. Prints the points exercised and recoveries checked; exits
# non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build-killpoints}
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" -Dwerror=true -Dkillpoints=true \
    -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
log=$(mktemp)
if ! meson compile -C "$dir" tests/store/test-killpoints >"$log" 2>&1; then
  tail -n 40 "$log"; rm -f "$log"; exit 1
fi
rm -f "$log"
start=$(date +%s)
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  "$dir/tests/store/test-killpoints"
echo "killpoints: $(( $(date +%s) - start )) s"
