#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Gloo inside a manylinux container (cibuildwheel before-all): the static
# source build into /opt/hvd-deps, with the image's cmake (pip-installed
# into the image's CPython if the image has none).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export HVD_RECIPE_PREFIX="${HVD_RECIPE_PREFIX:-/opt/hvd-deps}"
if ! command -v cmake >/dev/null; then
  py="${PYTHON:-/opt/python/cp312-cp312/bin/python}"
  "$py" -m pip install --quiet cmake ninja >&2
  PATH="$(dirname "$py"):$PATH"
  export PATH
fi
RECIPE_NAME=gloo/manylinux.sh exec bash "$here/source.sh" "$@"
