#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# NCCL inside a CUDA manylinux container (cibuildwheel before-all): the pip
# recipe into /opt/hvd-deps with the image's CPython; the CUDA major follows
# the image's /usr/local/cuda-X.Y. The repair step excludes libnccl.so.2.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PYTHON="${PYTHON:-/opt/python/cp312-cp312/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
export HVD_RECIPE_PREFIX="${HVD_RECIPE_PREFIX:-/opt/hvd-deps}"
if [ -z "${HVD_CUDA_TOOLKIT:-}" ] && [ -z "${HVD_BUILD_DESCRIPTION:-}" ]; then
  HVD_CUDA_TOOLKIT="$(ls -d /usr/local/cuda-* 2>/dev/null | sed 's|.*/cuda-||' | sort -V | tail -n 1)"
  export HVD_CUDA_TOOLKIT="${HVD_CUDA_TOOLKIT:-13.0}"
fi
RECIPE_NAME=nccl/manylinux.sh exec bash "$here/pip.sh" "$@"
