#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# The CUDA toolchain from NVIDIA's PyPI wheels into a prefix: nvcc, the CUDA
# runtime headers/libraries and CCCL, pinned to the catalog line's toolkit
# (HVD_CUDA_TOOLKIT, default 13.0 -> nvidia-cuda-nvcc==13.0.*; CUDA 12 uses
# the -cu12 wheel names). The driver (libcuda.so.1) never comes from a wheel.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
read_description
CUDA_TOOLKIT="${HVD_CUDA_TOOLKIT:-13.0}"
CUDA_ARCH="${HVD_CUDA_ARCH:-$(default_arch)}"
major="${CUDA_TOOLKIT%%.*}"
suffix=""
[ "$major" = 12 ] && suffix="-cu12"
pin="==${CUDA_TOOLKIT}.*"
pkgs=("nvidia-cuda-nvcc$suffix$pin" "nvidia-cuda-runtime$suffix$pin" "nvidia-cuda-cccl$suffix$pin")
# CUDA 13 split nvcc's back ends into their own wheels; unpinned they drift
# to a newer release whose PTX the pinned ptxas rejects.
[ "$major" = 12 ] || pkgs+=("nvidia-nvvm$pin" "nvidia-cuda-crt$pin")
pip_prefix_install "${pkgs[@]}"
site="$(prefix_site)"
root="$site/nvidia/cu$major"
[ -d "$root" ] || root="$site/nvidia/cuda_nvcc"
NVCC="$root/bin/nvcc"
[ -x "$NVCC" ] || die "no nvcc under $site/nvidia; run without --check to install it"
scratch
verify_cuda
emit CMAKE_CUDA_COMPILER "$NVCC"
emit CUDAToolkit_ROOT "$root"
