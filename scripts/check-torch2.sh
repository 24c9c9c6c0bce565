#!/usr/bin/env bash
# Syntax-only compile of the LibTorch-using sources against LibTorch 2.x headers.
#
# The project builds against Debian bookworm's libtorch-dev 1.13; runtime/compat.{h,cpp} and
# runtime/torch_pch.h carry the 2.x paths (TORCH_VERSION_MAJOR >= 2). This script checks those
# paths compile, without a PyTorch wheel and without touching the system's apt configuration:
#
#   1. A private apt configuration under .deps/apt-<suite>[-cuda]/ (own sources.list, lists and
#      cache; Debian archive keyring) fetches Debian trixie's header packages (falls back to
#      sid), which are unpacked with dpkg into .deps/torch2[-cuda]/. Nothing is installed.
#      Downloads and unpacking are skipped when already done (--refresh re-reads the index).
#   2. `g++ -fsyntax-only` on every .cpp of runtime/ and profiler/, plus the cli/ sources
#      whose includes reach torch, with the definitions, flags and forced precompiled header
#      the CMake build uses (runtime/CMakeLists.txt, profiler/CMakeLists.txt, TorchConfig).
#
# Variants:
#   gloo (default)  libtorch-dev + libgloo-dev from main: the CPU / c10d Gloo build.
#   nccl (--nccl)   libtorch-cuda-dev + libgloo-cuda-dev (contrib), nvidia-cuda-dev and
#                   libnccl-dev (non-free; about 1 GB to download, headers only are unpacked)
#                   with STAGECRAFT_WITH_CUDA=1 STAGECRAFT_WITH_NCCL=1 USE_C10D_NCCL=1, as a CUDA LibTorch
#                   build gets.
#
# Usage: scripts/check-torch2.sh [--nccl | --nccl-only] [-j N] [--suite S] [--refresh] [FILE...]
#   FILE...  check only these sources (paths relative to the repository root)
#   -j N     compile N files at once (default 1; a file takes ~30 s and ~1 GB)
# Prints OK/FAIL per file and exits non-zero if any file fails. Full compiler output is in
# .deps/check-torch2/<variant>/<file>.log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${STAGECRAFT_DEPS_DIR:-$ROOT/.deps}
CXX=${CXX:-g++}
JOBS=1
VARIANTS=(gloo)
SUITES=(trixie sid)
REFRESH=0
FILES=()

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

while (($#)); do
  case "$1" in
    --nccl) VARIANTS=(gloo nccl) ;;
    --nccl-only) VARIANTS=(nccl) ;;
    -j) JOBS=$2; shift ;;
    -j*) JOBS=${1#-j} ;;
    --suite) SUITES=("$2"); shift ;;
    --refresh) REFRESH=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "check-torch2: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) FILES+=("$1") ;;
  esac
  shift
done

log() { echo "check-torch2: $*" >&2; }
die() { log "$*"; exit 2; }

[[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] || die "needs debian-archive-keyring"
command -v dpkg-deb >/dev/null || die "needs dpkg-deb"
command -v apt-get >/dev/null || die "needs apt-get"

# ---------------------------------------------------------------------------------------------
# Step 1: headers from Debian, through a private apt configuration.

APT_OPTS=()
set_apt_opts() {  # $1: the private apt directory
  APT_OPTS=(-o "Dir::Etc::SourceList=$1/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$1/lists" -o "Dir::Cache=$1/cache" -o Dir::State::status=/dev/null
            -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
            -o APT::Architecture=amd64 -o Debug::NoLocking=1 -q)
  # As root apt drops to _apt for downloads, which cannot write into .deps/.
  [[ $(id -u) == 0 ]] && APT_OPTS+=(-o APT::Sandbox::User=root)
  return 0
}

# Prepares a private apt directory for one suite; prints its path. $1: suite, $2: components,
# $3: directory-name suffix.
apt_dir_for() {
  local suite=$1 components=$2 suffix=$3 dir
  dir=$DEPS/apt-$suite$suffix
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/debs"
  local line="deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite $components"
  if [[ ! -f $dir/sources.list || $(cat "$dir/sources.list") != "$line" ]]; then
    echo "$line" > "$dir/sources.list"
    rm -f "$dir"/lists/*_Packages* "$dir"/lists/*Release*
  fi
  set_apt_opts "$dir"
  if [[ $REFRESH == 1 ]] || ! compgen -G "$dir/lists/*_Packages*" >/dev/null; then
    log "apt-get update ($suite: $components) into ${dir#"$ROOT"/}"
    apt-get "${APT_OPTS[@]}" update >&2 || return 1
  fi
  echo "$dir"
}

# Fetches the packages (unless a .deb of the candidate version is already there) and unpacks
# them into $tree. $1: apt dir, $2: tree, rest: packages. Packages above 20 MB (CUDA, NCCL)
# are unpacked headers only.
fetch_and_unpack() {
  local dir=$1 tree=$2; shift 2
  local pkg ver deb debs=()
  set_apt_opts "$dir"
  for pkg in "$@"; do
    ver=$(apt-cache "${APT_OPTS[@]}" show --no-all-versions "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | head -1)
    [[ -n $ver ]] || die "package $pkg is not in $(cat "$dir/sources.list")"
    deb=$(compgen -G "$dir/debs/${pkg}_${ver//:/%3a}_*.deb" | head -1 || true)
    if [[ -z $deb ]]; then
      log "downloading $pkg $ver"
      (cd "$dir/debs" && apt-get "${APT_OPTS[@]}" download "$pkg" >&2)
      deb=$(compgen -G "$dir/debs/${pkg}_${ver//:/%3a}_*.deb" | head -1 || true)
      [[ -n $deb ]] || die "apt-get download $pkg left no .deb"
    fi
    debs+=("$deb")
  done
  local want have=""
  want=$(printf '%s\n' "${debs[@]##*/}")
  [[ -f $tree/.unpacked ]] && have=$(cat "$tree/.unpacked")
  [[ $want == "$have" ]] && return 0
  rm -rf "$tree"; mkdir -p "$tree"
  for deb in "${debs[@]}"; do
    log "unpacking ${deb##*/}"
    if (( $(stat -c %s "$deb") > 20000000 )); then
      dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tree" ./usr/include
    else
      dpkg-deb -x "$deb" "$tree"
    fi
  done
  echo "$want" > "$tree/.unpacked"
}

# Sets TREE for a variant, fetching what it needs.
TREE=""
prepare_variant() {
  local variant=$1 suite dir components suffix pkgs
  case $variant in
    gloo) components=main; suffix=""; pkgs=(libtorch-dev libgloo-dev) ;;
    nccl) components="main contrib non-free"; suffix=-cuda
          pkgs=(libtorch-cuda-dev libgloo-cuda-dev libnccl-dev nvidia-cuda-dev libcu++-dev) ;;
  esac
  for suite in "${SUITES[@]}"; do
    if dir=$(apt_dir_for "$suite" "$components" "$suffix"); then
      TREE=$DEPS/torch2$suffix
      fetch_and_unpack "$dir" "$TREE" "${pkgs[@]}"
      return 0
    fi
    log "suite $suite is not reachable; trying the next"
  done
  die "no suite of ${SUITES[*]} could be reached"
}

# ---------------------------------------------------------------------------------------------
# Step 2: syntax-only compiles.

# The literal INTERFACE_COMPILE_DEFINITIONS of the unpacked LibTorch's CMake targets (what
# target_link_libraries(... ${TORCH_LIBRARIES}) adds), e.g. USE_DISTRIBUTED;USE_C10D_GLOO.
torch_definitions() {
  local f
  f=$(compgen -G "$1/usr/lib/*/cmake/Caffe2/Caffe2Targets.cmake" | head -1 || true)
  [[ -n $f ]] || die "no Caffe2Targets.cmake under $1"
  sed -n 's/^ *INTERFACE_COMPILE_DEFINITIONS "\([^"$\\]*\)"$/\1/p' "$f" | tr ';' '\n' | sort -u | sed 's/^/-D/'
}

# TORCH_CXX_FLAGS from TorchConfig.cmake (the cxx11 ABI flag).
torch_cxx_flags() {
  local f
  f=$(compgen -G "$1/usr/lib/*/cmake/Torch/TorchConfig.cmake" | head -1 || true)
  [[ -n $f ]] && sed -n 's/^ *set(TORCH_CXX_FLAGS "\(-D_GLIBCXX_USE_CXX11_ABI=[01]\)")/\1/p' "$f" | tail -1
}

# runtime/CMakeLists.txt: target_precompile_headers(stagecraft_runtime PRIVATE torch_pch.h)
# and set_source_files_properties(a.cpp b.cpp PROPERTIES SKIP_PRECOMPILE_HEADERS ON).
pch_of() {  # $1: source relative to ROOT; prints the header CMake force-includes, if any
  local d=${1%/*} f=${1##*/} cm pch
  cm=$ROOT/$d/CMakeLists.txt
  [[ -f $cm ]] || return 0
  pch=$(sed -n 's/^ *target_precompile_headers([^ ]* PRIVATE \([^ )]*\)).*/\1/p' "$cm" | head -1)
  [[ -n $pch ]] || return 0
  if sed -n 's/^ *set_source_files_properties(\(.*\) PROPERTIES SKIP_PRECOMPILE_HEADERS ON).*/\1/p' "$cm" \
      | tr ' ' '\n' | grep -qx "$f"; then
    return 0
  fi
  echo "$d/$pch"
}

common_flags() {  # $1: tree
  local abi
  abi=$(torch_cxx_flags "$1"); abi=${abi:--D_GLIBCXX_USE_CXX11_ABI=1}
  # Top-level CMakeLists: C++17, no extensions, -Wall -Wextra -Wpedantic. Torch's include
  # directories come from an imported target, hence -isystem.
  echo -std=c++17 -Wall -Wextra -Wpedantic "$abi"
  torch_definitions "$1"
  echo -isystem "$1/usr/include" -isystem "$1/usr/include/torch/csrc/api/include" -I "$ROOT"
}

file_flags() {  # $1: source, $2: variant
  case $1 in
    runtime/*) [[ $2 == nccl ]] && echo -DSTAGECRAFT_WITH_CUDA=1 -DSTAGECRAFT_WITH_NCCL=1 -DUSE_C10D_NCCL=1 ;;
    cli/*) echo -DSTAGECRAFT_WITH_RUNTIME=1 ;;
  esac
  local pch; pch=$(pch_of "$1")
  [[ -n $pch ]] && echo -include "$pch"
  return 0
}

# The sources to check: runtime/ and profiler/ (the torch-linked libraries), and the cli/
# sources whose includes reach the torch headers.
select_files() {  # $1: tree
  local f
  for f in runtime/*.cpp profiler/*.cpp; do echo "$f"; done
  for f in cli/*.cpp; do
    # shellcheck disable=SC2046
    if (cd "$ROOT" && "$CXX" -MM $(common_flags "$1") $(file_flags "$f" gloo) "$f" 2>/dev/null) \
        | grep -q -e "$1/usr/include/torch" -e 'runtime/torch_pch.h'; then
      echo "$f"
    else
      log "skipping $f (does not include torch)"
    fi
  done
}

check_one() {  # $1: tree, $2: variant, $3: source, $4: log file; returns the compiler's status
  # shellcheck disable=SC2046
  (cd "$ROOT" && nice -n 10 "$CXX" -fsyntax-only $(common_flags "$1") $(file_flags "$3" "$2") "$3") > "$4" 2>&1
}

FAILED=0
run_variant() {
  local variant=$1 tree=$2 f logdir files=() pids=() n=0
  logdir=$DEPS/check-torch2/$variant
  rm -rf "$logdir"; mkdir -p "$logdir"
  local version
  version=$(sed -n 's/^#define TORCH_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' \
              "$tree/usr/include/torch/csrc/api/include/torch/version.h" | paste -sd.)
  log "variant $variant: LibTorch $version headers from ${tree#"$ROOT"/} ($(paste -sd' ' "$tree/.unpacked"))"
  if ((${#FILES[@]})); then files=("${FILES[@]}"); else mapfile -t files < <(select_files "$tree"); fi
  for f in "${files[@]}"; do
    [[ -f $ROOT/$f ]] || die "no such source: $f"
  done
  report() {  # $1: source, $2: status
    local lf=$logdir/${1//\//_}.log w
    w=$(grep -c ': warning: ' "$lf" || true)
    if [[ $2 == 0 ]]; then
      printf 'OK    [%s] %s%s\n' "$variant" "$1" "$( ((w)) && echo " ($w warnings, see ${lf#"$ROOT"/})")"
    else
      printf 'FAIL  [%s] %s (log: %s)\n' "$variant" "$1" "${lf#"$ROOT"/}"
      grep -E -m 12 -A 3 ': (fatal )?error: ' "$lf" | sed 's/^/      /' | cut -c1-400
      FAILED=1
    fi
  }
  # At most JOBS compiles at once; results are reported in file order.
  local i=0 j=0 st
  while ((i < ${#files[@]})); do
    if ((n < JOBS)); then
      check_one "$tree" "$variant" "${files[i]}" "$logdir/${files[i]//\//_}.log" &
      pids[i]=$!; n=$((n + 1)); i=$((i + 1))
      continue
    fi
    st=0; wait "${pids[j]}" || st=$?
    report "${files[j]}" "$st"; n=$((n - 1)); j=$((j + 1))
  done
  while ((j < ${#files[@]})); do
    st=0; wait "${pids[j]}" || st=$?
    report "${files[j]}" "$st"; j=$((j + 1))
  done
}

for v in "${VARIANTS[@]}"; do
  prepare_variant "$v"
  run_variant "$v" "$TREE"
done
exit "$FAILED"
