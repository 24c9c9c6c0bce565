#!/usr/bin/env bash
# Installs every Debian package stagecraft needs, now and in the issues to come (simulator:
# SimGrid; runtime and profiler: LibTorch with Gloo; planner: COIN-OR CBC; fuzz targets: clang
# and its libFuzzer runtime; the papers' figures: Debian's Python with matplotlib, pandas and
# Jupyter's nbconvert and kernel), so the set-up command never changes.
# Idempotent: when every package is present it does nothing; otherwise it runs `apt-get update`
# once and installs what is missing. Works as root (as on CI) or through sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libsimgrid-dev
  libtorch-dev libgloo-dev
  coinor-libcbc-dev
  clang libclang-rt-14-dev
  python3 python3-matplotlib python3-pandas jupyter-nbconvert python3-ipykernel
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi

$sudo apt-get update -q
echo "install-deps: installing ${missing[*]}"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
