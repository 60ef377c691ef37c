#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, then make a
# store of 256 KiB image records and gather random batches from it, printing the
# rates against this machine's own memcpy and zstd limits.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/bench/store-bench --quick "$@"
