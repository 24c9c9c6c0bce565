#!/usr/bin/env bash
# Installs every Debian package stagecraft needs, now and in the issues to come (simulator,
# runtime, profiler), so the set-up command never changes. Idempotent: packages already present
# are skipped, and `apt-get update` runs at most once per machine (a stamp file remembers it).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libsimgrid-dev simgrid
  libtorch-dev libgloo-dev
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

stamp=/var/tmp/stagecraft-apt-updated
if [ ! -f "$stamp" ]; then
  $sudo apt-get update -q
  $sudo touch "$stamp" 2>/dev/null || true
fi
echo "install-deps: installing ${missing[*]}"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
