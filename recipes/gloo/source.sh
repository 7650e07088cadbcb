#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Gloo built from source as a static, position-independent library into a
# prefix (the manylinux and pip environments have no Gloo package). The
# wheel then carries Gloo inside its own .so: nothing for auditwheel to graft.
# Source: GLOO_SOURCE_DIR if set, else a git clone of GLOO_REPO at GLOO_REF
# (a pinned commit, so every CI job builds the same Gloo).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
[ -n "$PREFIX" ] || die "no prefix: pass --prefix DIR or set HVD_RECIPE_PREFIX"
GLOO_REPO="${GLOO_REPO:-https://github.com/pytorch/gloo.git}"
GLOO_REF="${GLOO_REF:-5b14351}"  # the commit Debian 12 packages (0.0~git20220518.5b14351)
if [ "$CHECK_ONLY" = 0 ] && [ ! -f "$PREFIX/lib/libgloo.a" ] && [ ! -f "$PREFIX/lib64/libgloo.a" ]; then
  command -v cmake >/dev/null || die "cmake not found; pip install cmake ninja first"
  src="${GLOO_SOURCE_DIR:-}"
  work="$(mktemp -d)"
  if [ -z "$src" ]; then
    command -v git >/dev/null || die "git not found and GLOO_SOURCE_DIR not set"
    say "cloning $GLOO_REPO at $GLOO_REF"
    git clone --quiet "$GLOO_REPO" "$work/gloo" >&2 || die "cannot clone $GLOO_REPO; set GLOO_SOURCE_DIR to a Gloo checkout"
    git -C "$work/gloo" checkout --quiet "$GLOO_REF" >&2 || die "no commit $GLOO_REF in $GLOO_REPO"
    src="$work/gloo"
  fi
  say "building static Gloo from $src into $PREFIX"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DBUILD_SHARED_LIBS=OFF -DUSE_MPI=OFF -DUSE_CUDA=OFF -DUSE_REDIS=OFF -DUSE_IBVERBS=OFF \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" >&2 || die "Gloo configure failed"
  cmake --build "$work/build" --parallel "$(nproc)" >&2 || die "Gloo build failed"
  cmake --install "$work/build" >&2 || die "Gloo install failed"
  rm -rf "$work"
fi
lib="$(ls "$PREFIX"/lib*/libgloo.a 2>/dev/null | head -n 1)"
[ -n "$lib" ] || die "no static Gloo in $PREFIX; run without --check to build it"
GLOO_CFLAGS="-I$PREFIX/include"
GLOO_LIBS="$lib"
scratch
verify_gloo
emit Gloo_DIR "$(dirname "$lib")/cmake/Gloo"
emit CMAKE_PREFIX_PATH "$PREFIX"
