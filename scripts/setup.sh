#!/usr/bin/env bash
# Installs what zrecord needs to build and test on Debian 12, then configures and
# builds it in ./build. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  gcc pkg-config meson ninja-build       # the build
  libzstd-dev libevent-dev libmsgpack-dev  # the engine and the daemon
  check                                  # C unit tests
  clang-14 libclang-rt-14-dev            # libFuzzer targets
)
PIP_PACKAGES=(numpy msgpack pytest)

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

if ! python3 -c 'import numpy, msgpack, pytest' 2>/dev/null; then
  echo "setup: pip installing ${PIP_PACKAGES[*]}"
  python3 -m pip install -q "${PIP_PACKAGES[@]}"
fi

BUILD=${BUILD:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dwerror=true >/dev/null
fi
meson compile -C "$BUILD" >/dev/null
echo "setup: built in $BUILD"
