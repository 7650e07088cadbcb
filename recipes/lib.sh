# shellcheck shell=bash
# Shared helpers for the dependency recipes (sourced, not run).
#
# Every recipe is `bash recipes/<dependency>/<environment>.sh [--check] [--prefix DIR]`:
# it installs the dependency (unless --check), proves it works by compiling
# (and where possible running) a tiny program against it, and prints
# `export NAME='value'` lines on stdout that tell CMake where it is, so
# `eval "$(bash recipes/mpi/pip.sh)"` prepares a shell for a source build.
# Progress goes to stderr; a failure is one line naming what to do, exit 1.
set -euo pipefail

RECIPE_NAME="${RECIPE_NAME:-$(basename "$(dirname "$0")")/$(basename "$0")}"
CHECK_ONLY=0
PREFIX="${HVD_RECIPE_PREFIX:-}"
PYTHON="${PYTHON:-python3}"

say() { printf '%s: %s\n' "$RECIPE_NAME" "$*" >&2; }
die() { printf '%s: error: %s\n' "$RECIPE_NAME" "$*" >&2; exit 1; }
emit() { printf "export %s='%s'\n" "$1" "$2"; }
emit_path() { printf 'export PATH="%s:$PATH"\n' "$1"; }

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --check) CHECK_ONLY=1 ;;
      --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; PREFIX="$2"; shift ;;
      --prefix=*) PREFIX="${1#--prefix=}" ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
      *) die "unknown option $1 (use --check or --prefix DIR)" ;;
    esac
    shift
  done
}

# A scratch directory removed on exit.
scratch() {
  SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/hvd-recipe.XXXXXX")"
  trap 'rm -rf "$SCRATCH"' EXIT
}

# Debian: install the packages that are missing (none: no apt call at all).
apt_ensure() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$CHECK_ONLY" = 1 ] && die "missing Debian packages: ${missing[*]}; run: apt-get install ${missing[*]}"
  command -v apt-get >/dev/null || die "not a Debian/Ubuntu system (no apt-get); pick the pip or manylinux recipe"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  say "installing ${missing[*]}"
  $sudo apt-get install -y --no-install-recommends "${missing[@]}" >&2 \
    || { $sudo apt-get update >&2 && $sudo apt-get install -y --no-install-recommends "${missing[@]}" >&2; } \
    || die "apt-get could not install ${missing[*]}"
}

# pip: install requirements into PREFIX (a plain --prefix tree: bin/ include/ lib/).
pip_prefix_install() {
  [ -n "$PREFIX" ] || die "no prefix: pass --prefix DIR or set HVD_RECIPE_PREFIX"
  [ "$CHECK_ONLY" = 1 ] && return 0
  say "pip installing $* into $PREFIX"
  "$PYTHON" -m pip install --disable-pip-version-check --no-warn-script-location --quiet --ignore-installed \
    --prefix "$PREFIX" "$@" >&2 || die "pip could not install $*; check the network/index or pin another version"
}

# The site-packages directory of PREFIX for $PYTHON.
prefix_site() {
  "$PYTHON" -c 'import sys,sysconfig; print(sysconfig.get_path("purelib", vars={"base": sys.argv[1], "platbase": sys.argv[1]}))' "$PREFIX"
}

# The CUDA line and arch from the variant's build description, the same file
# CMake builds from (HVD_BUILD_DESCRIPTION, written by
# `python -m selector_backend cmake-config --write FILE`): sets HVD_CUDA_TOOLKIT
# and HVD_CUDA_ARCH (the arch its PTX is for, the highest). Without the
# variable the recipe's own defaults apply (the newest line).
read_description() {
  local file="${HVD_BUILD_DESCRIPTION:-}" toolkit arch
  [ -n "$file" ] || return 0
  [ -r "$file" ] || die "HVD_BUILD_DESCRIPTION=$file is not readable; write it with: python -m selector_backend cmake-config --write $file AXIS=VALUE ..."
  toolkit="$(sed -n 's/^set(HVD_CUDA_TOOLKIT \([0-9][0-9.]*\))$/\1/p' "$file")"
  arch="$(sed -n 's/^set(HVD_CUDA_ARCHITECTURES .* \([0-9]*\)-virtual)$/\1/p' "$file")"
  if [ -z "$toolkit" ] || [ -z "$arch" ]; then
    die "$file describes no CUDA build (a CPU-only variant needs no CUDA or NCCL recipe)"
  fi
  [ -z "${HVD_CUDA_TOOLKIT:-}" ] || [ "$HVD_CUDA_TOOLKIT" = "$toolkit" ] \
    || die "HVD_CUDA_TOOLKIT=$HVD_CUDA_TOOLKIT but $file is for CUDA $toolkit; unset one of them"
  export HVD_CUDA_TOOLKIT="$toolkit" HVD_CUDA_ARCH="${HVD_CUDA_ARCH:-$arch}"
}
