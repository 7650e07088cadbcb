#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# MPI inside a manylinux container (cibuildwheel before-all): the pip recipe,
# run with the image's CPython, into /opt/hvd-deps (CIBW_ENVIRONMENT puts
# /opt/hvd-deps on CMAKE_PREFIX_PATH and PATH). The wheel links libmpi.so.12;
# the repair step excludes it (the `mpi` extra provides it at run time).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PYTHON="${PYTHON:-/opt/python/cp312-cp312/bin/python}"
export HVD_RECIPE_PREFIX="${HVD_RECIPE_PREFIX:-/opt/hvd-deps}"
[ -x "$PYTHON" ] || PYTHON=python3
RECIPE_NAME=mpi/manylinux.sh exec bash "$here/pip.sh" "$@"
