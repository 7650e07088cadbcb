#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# The CUDA toolchain on Debian/Ubuntu: an nvcc already on PATH (NVIDIA's
# packages or runfile, /usr/local/cuda) of the requested major, else
# Debian's nvidia-cuda-toolkit (needs the non-free component enabled).
# HVD_BUILD_DESCRIPTION (the build description CMake gets) or HVD_CUDA_TOOLKIT:
# the catalog line's toolkit (default 13.0).
# Prints CMAKE_CUDA_COMPILER and CUDAToolkit_ROOT.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
read_description
CUDA_TOOLKIT="${HVD_CUDA_TOOLKIT:-13.0}"
CUDA_ARCH="${HVD_CUDA_ARCH:-$(default_arch)}"
NVCC=""
for candidate in "/usr/local/cuda-$CUDA_TOOLKIT/bin/nvcc" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
  if [ -z "$NVCC" ] && [ -n "$candidate" ] && [ -x "$candidate" ]; then NVCC="$candidate"; fi
done
if [ -z "$NVCC" ]; then
  apt-cache policy nvidia-cuda-toolkit 2>/dev/null | grep -q 'Candidate: [0-9]' \
    || die "no nvcc and no nvidia-cuda-toolkit package; enable Debian's non-free component or use recipes/cuda/pip.sh"
  apt_ensure nvidia-cuda-toolkit
  NVCC="$(command -v nvcc)"
fi
scratch
verify_cuda
root="$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)"
emit CMAKE_CUDA_COMPILER "$NVCC"
emit CUDAToolkit_ROOT "$root"
