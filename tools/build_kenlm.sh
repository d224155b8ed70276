#!/usr/bin/env bash
# KenLM's estimator and scorer, `lmplz` and `query`, built from the kenlm source distribution into BIN (`make kenlm`).
# Usage: tools/build_kenlm.sh PYTHON VERSION BIN [JOBS]
#   PYTHON   the venv's python: its pip fetches the source from the package registry (or pip's cache); CI reaches
#            package registries only, and the sdist on PyPI holds KenLM's whole C++ tree with its CMake files
#   VERSION  the kenlm pin of requirements-test.lock, so the binaries and the Python module are one KenLM
#   BIN      where lmplz and query go (the venv's bin, on PATH under make)
#   JOBS     compile jobs (2: CI's machine has 2 cores)
# Debian's cmake, compiler, boost and compression dev packages are installed when missing, as root (quietly, unless
# apt-get fails); without root the missing ones are named. Only the two programs are built (not the Python module,
# the tests or the interpolation tool). Quiet unless it fails, then the build log's tail.
set -euo pipefail
py=$1 version=$2 bin=$3 jobs=${4:-2}
debs=(cmake g++ make libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev
      zlib1g-dev libbz2-dev liblzma-dev)
missing=()
for d in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q "ok installed" || missing+=("$d")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" != 0 ]; then
        echo "make kenlm: missing Debian packages and not root: apt-get install ${missing[*]}" >&2
        exit 1
    fi
    # a fresh machine may have no package lists yet: fetch them only when the first try fails
    apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/kenlm-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$work/build.log
fail() { echo "make kenlm: $1 failed; the end of its log:" >&2; tail -n 40 "$log" >&2; exit 1; }
# --no-binary kenlm: the source, not a wheel; its build requirements (setuptools, cmake) may come as wheels, which
# pip needs only to read the sdist's metadata
"$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary kenlm "kenlm==$version" \
    -d "$work" >"$log" 2>&1 || fail "pip download kenlm==$version"
tar -xzf "$work/kenlm-$version.tar.gz" -C "$work"
# No Eigen (the interpolation tool), no Python module, no tests: the two programs only, statically linked to
# KenLM's own libraries, so the binaries can be copied out of the build folder.
cmake -S "$work/kenlm-$version" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DENABLE_PYTHON=OFF \
    -DCOMPILE_TESTS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON >>"$log" 2>&1 || fail "cmake (configure)"
cmake --build "$work/build" --target lmplz query -j "$jobs" >>"$log" 2>&1 || fail "cmake --build"
mkdir -p "$bin"
install -m 755 "$work/build/bin/lmplz" "$work/build/bin/query" "$bin/"
