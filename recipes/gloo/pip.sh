#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Gloo for a pip-only environment. No PyPI package ships Gloo's headers and
# library, so this installs the build tools from PyPI (cmake, ninja) into the
# prefix and runs the static source build (source.sh) with them.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
parse_args "$@"
pip_prefix_install cmake ninja
export PATH="$PREFIX/bin:$PATH"
args=(--prefix "$PREFIX")
[ "$CHECK_ONLY" = 1 ] && args+=(--check)
RECIPE_NAME=gloo/pip.sh exec bash "$(dirname "$0")/source.sh" "${args[@]}"
