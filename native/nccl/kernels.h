/*
 * CUDA kernels of the NCCL plugin, behind plain host functions so plugin.cpp
 * (compiled by the host compiler) never sees device code.
 *
 * Why kernels at all: NCCL reduces, but Horovod semantics also need scaling
 * (prescale/postscale, AVERAGE = SUM * 1/size) and tensor fusion (many small
 * tensors packed into one buffer so one NCCL call serves them all).
 */
#ifndef HVD_NCCL_KERNELS_H
#define HVD_NCCL_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

namespace hvd_nccl {

/* One buffer of a batched copy: `count` elements from src to dst. */
struct CopyItem {
  const void* src;
  void* dst;
  size_t count;
};

/* buf[i] *= factor for `count` elements of `dtype` (hvd_plugin_dtype).
 * Floating types scale in float (double for float64); integers scale in
 * double and truncate toward zero, as a C cast does. */
cudaError_t scale_buffer(void* buf, size_t count, int dtype, double factor, cudaStream_t stream);

/* dst = src * factor (plain copy when factor == 1) for every item, with as
 * few kernel launches as possible: the fusion pack and unpack step. */
cudaError_t batched_scaled_copy(const CopyItem* items, size_t n, int dtype, double factor,
                                cudaStream_t stream);

}  // namespace hvd_nccl

#endif /* HVD_NCCL_KERNELS_H */
