#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# NCCL from Debian/Ubuntu: libnccl-dev from Debian's non-free component or
# NVIDIA's CUDA apt repository. Without either, use recipes/nccl/pip.sh.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
parse_args "$@"
if ! dpkg-query -W -f='${Status}' libnccl-dev 2>/dev/null | grep -q 'install ok installed'; then
  apt-cache policy libnccl-dev 2>/dev/null | grep -q 'Candidate: [0-9]' \
    || die "no libnccl-dev package here; enable Debian non-free or NVIDIA's CUDA repository, or use recipes/nccl/pip.sh"
  apt_ensure libnccl-dev
fi
header="$(dpkg -L libnccl-dev | grep '/nccl.h$' | head -n 1)"
lib="$(dpkg -L libnccl-dev | grep '/libnccl.so$' | head -n 1)"
[ -n "$header" ] && [ -n "$lib" ] || die "libnccl-dev lacks nccl.h or libnccl.so; reinstall it"
emit NCCL_INCLUDE_DIR "$(dirname "$header")"
emit NCCL_LIBRARY "$lib"
