#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# NCCL from NVIDIA's PyPI wheel (nvidia-nccl-cu12 / -cu13) into a prefix: the
# same wheel the gpu-nvidia extra installs at run time, so the build links
# the libnccl.so.2 users get and auditwheel must not graft it. The wheel has
# no unversioned libnccl.so; this adds the link a linker needs under
# PREFIX/lib. HVD_CUDA_TOOLKIT picks the CUDA major (default 13.0);
# HVD_NCCL_VERSION pins NCCL (e.g. 2.27.*).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
parse_args "$@"
read_description
major="${HVD_CUDA_TOOLKIT:-13.0}"; major="${major%%.*}"
pip_prefix_install "nvidia-nccl-cu$major${HVD_NCCL_VERSION:+==$HVD_NCCL_VERSION}"
site="$(prefix_site)"
nccl="$site/nvidia/nccl"
[ -f "$nccl/include/nccl.h" ] && [ -f "$nccl/lib/libnccl.so.2" ] \
  || die "no NCCL under $nccl; run without --check to install nvidia-nccl-cu$major into $PREFIX"
if [ "$CHECK_ONLY" = 0 ]; then
  mkdir -p "$PREFIX/lib" "$PREFIX/include"
  ln -sf "$nccl/lib/libnccl.so.2" "$PREFIX/lib/libnccl.so"
  ln -sf "$nccl/include/nccl.h" "$PREFIX/include/nccl.h"
fi
# Link and run ncclGetVersion (no GPU needed) when a CUDA compiler is at hand.
nvcc="${CMAKE_CUDA_COMPILER:-$(command -v nvcc || true)}"
if [ -n "$nvcc" ]; then
  scratch
  printf '#include <nccl.h>\n#include <cstdio>\nint main(){int v=0;if(ncclGetVersion(&v))return 1;std::printf("%%d\\n",v);return 0;}\n' \
    > "$SCRATCH/v.cu"
  "$nvcc" "$SCRATCH/v.cu" -I"$nccl/include" -L"$nccl/lib" -l:libnccl.so.2 -Xlinker -rpath="$nccl/lib" \
    -o "$SCRATCH/v" >&2 || die "$nvcc cannot link a program against $nccl/lib/libnccl.so.2"
  code="$("$SCRATCH/v")" || die "ncclGetVersion failed in $nccl"
  say "verified: a program linked with libnccl.so.2 reports version code $code"
fi
version="$(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' "$nccl/include/nccl.h" | paste -sd.)"
say "NCCL $version for CUDA $major at $nccl"
emit NCCL_ROOT "$nccl"
emit NCCL_INCLUDE_DIR "$nccl/include"
emit NCCL_LIBRARY "$nccl/lib/libnccl.so.2"
