#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, then run the
# example training loop: it makes a dataset with from_numpy, trains a small model
# from an endless DataLoader served by zrecordd (started on demand by the client:
# the embedded default) and prints batches/s.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ZRECORDD="$PWD/build/daemon/zrecordd"
# the example imports loaderx as installed; here, the checkout's client
export PYTHONPATH="$PWD/python-client${PYTHONPATH:+:$PYTHONPATH}"
exec python3 python-client/examples/train_loop.py "$@"
