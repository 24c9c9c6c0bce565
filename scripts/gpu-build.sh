#!/usr/bin/env bash
# Builds stagecraft against the LibTorch inside the installed PyTorch wheel (LibTorch 2.x,
# CUDA, NCCL) into build-gpu/, simulator off. Needs python3 with torch, CUDA and cmake/ninja.
# Usage: [TARGETS="a b"] scripts/gpu-build.sh [extra cmake -D options]   (docs/gpu.md)
# TARGETS limits the build to those targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
# Dependencies carried from the development machine (scripts/gpu-deps.sh), when present.
extra=()
if [ -d .deps/gpu/usr ]; then
  prefix="$prefix;$PWD/.deps/gpu/usr;$PWD/.deps/gpu/usr/lib/x86_64-linux-gnu/cmake;$PWD/.deps/gpu/usr/share/cmake"
fi
# GoogleTest from source, so that it shares the wheel's _GLIBCXX_USE_CXX11_ABI.
if [ -d .deps/gpu/usr/src/googletest ]; then
  extra+=(-DSTAGECRAFT_GTEST_SOURCE_DIR="$PWD/.deps/gpu/usr/src/googletest")
fi
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DSTAGECRAFT_BUILD_SIM=OFF -DSTAGECRAFT_BUILD_RUNTIME=ON \
  -DSTAGECRAFT_BUILD_TESTS=ON -DSTAGECRAFT_BUILD_BENCH=ON \
  -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" "${extra[@]}" "$@"
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
keep_going=()
[ ${#generator[@]} -eq 0 ] || keep_going=(-- -k 0)   # ninja: every error in one run
cmake --build build-gpu -j"$(nproc 2>/dev/null || echo 2)" "${targets[@]}" "${keep_going[@]}"
