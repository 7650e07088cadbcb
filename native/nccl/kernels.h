/*
 * CUDA kernels of the NCCL plugin, behind plain host functions so plugin.cpp
 * (compiled by the host compiler) never sees device code.
 *
 * Why kernels at all: NCCL reduces, but Horovod semantics also need scaling
 * (prescale/postscale, AVERAGE = SUM * 1/size), int16 carried as 32-bit
 * integers (plan.h) and tensor fusion (many small tensors packed into one
 * buffer so one NCCL call serves them all).
 */
#ifndef HVD_NCCL_KERNELS_H
#define HVD_NCCL_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

namespace hvd_nccl {

/* One buffer of a batched copy: `count` elements from src to dst (src may
 * equal dst: an in-place pass). */
struct CopyItem {
  const void* src;
  void* dst;
  size_t count;
};

/* What a copy does to each element on the way. */
enum class Convert {
  Same,     /* dtype -> dtype */
  Widen16,  /* int16 -> int32 (sign-extended); the factor applies in int16 first */
  Narrow16, /* int32 -> int16 (its low 16 bits); the factor applies in int16 after */
};

/* dst = src * factor (a plain copy when factor == 1) for every item, with as
 * few kernel launches as possible: the scaling passes, and fusion's pack and
 * unpack. `dtype` (an hvd_plugin_dtype) is the tensor's type, the one the
 * factor applies in: float32/float64 in their own type, float16 by the factor
 * rounded to float16 (Horovod's GPU kernels; plan.h says why), bfloat16 in
 * float32, integers in float64 truncated toward zero, as a C cast does (the
 * CPU path's kernels_cpu.cpp); bool is never scaled. */
cudaError_t batched_copy(const CopyItem* items, size_t n, int dtype, Convert convert, double factor,
                         cudaStream_t stream);

}  // namespace hvd_nccl

#endif /* HVD_NCCL_KERNELS_H */
