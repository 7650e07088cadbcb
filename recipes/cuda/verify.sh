# shellcheck shell=bash
# Compile a kernel for the line's newest arch with NVCC (sourced by the CUDA
# recipes; no GPU needed). Needs NVCC, CUDA_TOOLKIT; uses SCRATCH.
verify_cuda() {
  local have
  have="$("$NVCC" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
  [ -n "$have" ] || die "$NVCC --version did not report a release"
  [ "${have%%.*}" = "${CUDA_TOOLKIT%%.*}" ] || die "$NVCC is CUDA $have, the variant needs CUDA ${CUDA_TOOLKIT%%.*}.x"
  cat > "$SCRATCH/k.cu" <<'CU'
__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
int main() { return 0; }
CU
  "$NVCC" -arch="sm_${CUDA_ARCH}" -c "$SCRATCH/k.cu" -o "$SCRATCH/k.o" >&2 \
    || die "$NVCC cannot compile for sm_${CUDA_ARCH}"
  say "verified: $NVCC (CUDA $have) compiles sm_${CUDA_ARCH}"
  export CUDA_HAVE="$have"
}

# The newest arch the line builds (catalog archs, e.g. 120 for CUDA 13).
default_arch() {
  case "${CUDA_TOOLKIT%%.*}" in
    12) echo 90 ;;
    13) echo 120 ;;
    *) echo 80 ;;
  esac
}
