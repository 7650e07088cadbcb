#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# The CUDA toolchain inside a CUDA manylinux image (cibuildwheel before-all).
# The pytorch/manylinux2_28*-builder:cudaX.Y images ship /usr/local/cuda-X.Y;
# on a plain manylinux_2_28 image this installs NVIDIA's cuda-minimal-build
# RPMs for the line instead. HVD_CUDA_TOOLKIT defaults to the image's CUDA.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
read_description
CUDA_TOOLKIT="${HVD_CUDA_TOOLKIT:-$(ls -d /usr/local/cuda-* 2>/dev/null | sed 's|.*/cuda-||' | sort -V | tail -n 1)}"
[ -n "$CUDA_TOOLKIT" ] || die "no /usr/local/cuda-X.Y in this image; set HVD_CUDA_TOOLKIT or use a CUDA manylinux image"
CUDA_ARCH="${HVD_CUDA_ARCH:-$(default_arch)}"
NVCC="/usr/local/cuda-$CUDA_TOOLKIT/bin/nvcc"
if [ ! -x "$NVCC" ] && [ "$CHECK_ONLY" = 0 ]; then
  command -v dnf >/dev/null || die "no $NVCC and no dnf to install it"
  arch="$(uname -m)"; [ "$arch" = aarch64 ] && arch=sbsa
  dnf config-manager --add-repo "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/$arch/cuda-rhel8.repo" >&2
  dnf install -y "cuda-minimal-build-${CUDA_TOOLKIT/./-}" >&2 || die "cannot install CUDA $CUDA_TOOLKIT"
fi
[ -x "$NVCC" ] || die "no $NVCC"
scratch
verify_cuda
emit CMAKE_CUDA_COMPILER "$NVCC"
emit CUDAToolkit_ROOT "/usr/local/cuda-$CUDA_TOOLKIT"
