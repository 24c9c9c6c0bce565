#!/usr/bin/env bash
# Fills .deps/gpu/ (ignored) with the header-only and static dependencies that the GPU machine
# lacks (it has CUDA, CMake, ninja and PyTorch, but no Debian packages of ours): nlohmann_json,
# CLI11, GoogleTest and Google Benchmark, fetched as Debian packages with `apt-get download`
# and unpacked with `dpkg -x` (nothing is installed here). Run it on this machine, then name
# .deps/gpu in the device tool's `carry`; scripts/gpu-build.sh finds it. (docs/gpu.md)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.deps/gpu
debs=.deps/gpu-debs
packages=(nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian)
mkdir -p "$debs" "$dest"
if ! (cd "$debs" && apt-get download "${packages[@]}" >/dev/null 2>&1); then
  apt-get update -qq
  (cd "$debs" && apt-get download "${packages[@]}")
fi
for d in "$debs"/*.deb; do dpkg -x "$d" "$dest"; done
echo "gpu-deps: ${#packages[@]} packages unpacked into $dest ($(du -sh "$dest" | cut -f1))"
