// The plugin's one kernel: a batched element-wise copy that scales and
// converts, instantiated for every hvd_plugin_dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "hvd/nccl_plugin.h"
#include "kernels.h"

namespace hvd_nccl {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;
// Buffers per launch: the batch travels as a kernel parameter (well under
// the 4 KiB parameter limit), so no device-side descriptor is allocated.
constexpr int kBatch = 32;

struct CopyBatch {
  const void* src[kBatch];
  void* dst[kBatch];
  size_t count[kBatch];
};

// How one element is multiplied by a factor, per element type.
template <typename T>
struct Scale {
  __device__ static T apply(T v, double f) {
    return static_cast<T>(static_cast<double>(v) * f);  // integers: truncate toward zero
  }
};
template <>
struct Scale<float> {
  __device__ static float apply(float v, double f) { return v * static_cast<float>(f); }
};
template <>
struct Scale<double> {
  __device__ static double apply(double v, double f) { return v * f; }
};
template <>
struct Scale<__half> {  // Horovod's GPU rule: the factor rounded to float16, the product rounded once
  __device__ static __half apply(__half v, double f) {
    return __float2half(__half2float(v) * __half2float(__float2half(static_cast<float>(f))));
  }
};
template <>
struct Scale<__nv_bfloat16> {
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 v, double f) {
    return __float2bfloat16(__bfloat162float(v) * static_cast<float>(f));
  }
};

// blockIdx.y picks the buffer; blocks along x stride over its elements.
// S: the source element, T: the tensor's type (scaled in), D: the destination element.
template <typename S, typename T, typename D>
__global__ void batched_copy_kernel(CopyBatch batch, double factor, bool scale) {
  const S* src = static_cast<const S*>(batch.src[blockIdx.y]);
  D* dst = static_cast<D*>(batch.dst[blockIdx.y]);
  size_t count = batch.count[blockIdx.y];
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    T v = static_cast<T>(src[i]);  // Narrow16: the low 16 bits
    dst[i] = static_cast<D>(scale ? Scale<T>::apply(v, factor) : v);
  }
}

unsigned blocks_for(size_t count) {
  size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<size_t>(std::max<size_t>(blocks, 1), kMaxBlocks));
}

template <typename S, typename T, typename D>
cudaError_t copy_typed(const CopyItem* items, size_t n, double factor, cudaStream_t stream) {
  bool scale = factor != 1.0;
  for (size_t first = 0; first < n; first += kBatch) {
    CopyBatch batch{};
    size_t in_batch = std::min<size_t>(kBatch, n - first);
    size_t largest = 0;
    for (size_t k = 0; k < in_batch; ++k) {
      batch.src[k] = items[first + k].src;
      batch.dst[k] = items[first + k].dst;
      batch.count[k] = items[first + k].count;
      largest = std::max(largest, items[first + k].count);
    }
    dim3 grid(blocks_for(largest), static_cast<unsigned>(in_batch));
    batched_copy_kernel<S, T, D><<<grid, kThreads, 0, stream>>>(batch, factor, scale);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t copy_same(const CopyItem* items, size_t n, double factor, cudaStream_t stream) {
  return copy_typed<T, T, T>(items, n, factor, stream);
}

}  // namespace

cudaError_t batched_copy(const CopyItem* items, size_t n, int dtype, Convert convert, double factor,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (convert == Convert::Widen16)
    return dtype == HVD_PLUGIN_INT16 ? copy_typed<int16_t, int16_t, int32_t>(items, n, factor, stream)
                                     : cudaErrorInvalidValue;
  if (convert == Convert::Narrow16)
    return dtype == HVD_PLUGIN_INT16 ? copy_typed<int32_t, int16_t, int16_t>(items, n, factor, stream)
                                     : cudaErrorInvalidValue;
  switch (dtype) {
    case HVD_PLUGIN_FLOAT16: return copy_same<__half>(items, n, factor, stream);
    case HVD_PLUGIN_BFLOAT16: return copy_same<__nv_bfloat16>(items, n, factor, stream);
    case HVD_PLUGIN_FLOAT32: return copy_same<float>(items, n, factor, stream);
    case HVD_PLUGIN_FLOAT64: return copy_same<double>(items, n, factor, stream);
    case HVD_PLUGIN_INT32: return copy_same<int32_t>(items, n, factor, stream);
    case HVD_PLUGIN_INT64: return copy_same<int64_t>(items, n, factor, stream);
    case HVD_PLUGIN_UINT8: return copy_same<uint8_t>(items, n, factor, stream);
    case HVD_PLUGIN_INT8: return copy_same<int8_t>(items, n, factor, stream);
    case HVD_PLUGIN_INT16: return copy_same<int16_t>(items, n, factor, stream);
    case HVD_PLUGIN_BOOL: return copy_same<uint8_t>(items, n, 1.0, stream);  // never scaled
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace hvd_nccl
