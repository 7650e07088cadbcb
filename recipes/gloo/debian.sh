#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Gloo from Debian/Ubuntu (libgloo-dev: headers, libgloo.so.0, CMake config).
# The library is shared, so auditwheel repair grafts it into the wheel
# ("bundled"); CI builds use the static source build instead (manylinux.sh).
# Prints Gloo_DIR for find_package(Gloo CONFIG).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
apt_ensure libgloo-dev
config="$(dpkg -L libgloo-dev | grep '/GlooConfig.cmake$' | head -n 1)"
[ -n "$config" ] || die "libgloo-dev has no GlooConfig.cmake; reinstall it"
GLOO_CFLAGS=""
GLOO_LIBS="-lgloo"
scratch
verify_gloo
emit Gloo_DIR "$(dirname "$config")"
