// Scaling and fused pack/unpack kernels for every hvd_plugin_dtype.
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
struct Scale<__half> {
  __device__ static __half apply(__half v, double f) {
    return __float2half(__half2float(v) * static_cast<float>(f));
  }
};
template <>
struct Scale<__nv_bfloat16> {
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 v, double f) {
    return __float2bfloat16(__bfloat162float(v) * static_cast<float>(f));
  }
};

template <typename T>
__global__ void scale_kernel(T* buf, size_t count, double factor) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    buf[i] = Scale<T>::apply(buf[i], factor);
  }
}

// blockIdx.y picks the buffer; blocks along x stride over its elements.
template <typename T>
__global__ void batched_copy_kernel(CopyBatch batch, double factor, bool scale) {
  const T* src = static_cast<const T*>(batch.src[blockIdx.y]);
  T* dst = static_cast<T*>(batch.dst[blockIdx.y]);
  size_t count = batch.count[blockIdx.y];
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    dst[i] = scale ? Scale<T>::apply(src[i], factor) : src[i];
  }
}

unsigned blocks_for(size_t count) {
  size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<size_t>(std::max<size_t>(blocks, 1), kMaxBlocks));
}

template <typename T>
cudaError_t scale_typed(void* buf, size_t count, double factor, cudaStream_t stream) {
  scale_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(buf), count, factor);
  return cudaGetLastError();
}

template <typename T>
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
    batched_copy_kernel<T><<<grid, kThreads, 0, stream>>>(batch, factor, scale);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// Calls F<T>::run(args...) for the element type `dtype` names.
template <template <typename> class F, typename... Args>
cudaError_t dispatch(int dtype, Args... args) {
  switch (dtype) {
    case HVD_PLUGIN_FLOAT16: return F<__half>::run(args...);
    case HVD_PLUGIN_BFLOAT16: return F<__nv_bfloat16>::run(args...);
    case HVD_PLUGIN_FLOAT32: return F<float>::run(args...);
    case HVD_PLUGIN_FLOAT64: return F<double>::run(args...);
    case HVD_PLUGIN_INT32: return F<int32_t>::run(args...);
    case HVD_PLUGIN_INT64: return F<int64_t>::run(args...);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
struct ScaleOp {
  static cudaError_t run(void* buf, size_t count, double factor, cudaStream_t stream) {
    return scale_typed<T>(buf, count, factor, stream);
  }
};
template <typename T>
struct CopyOp {
  static cudaError_t run(const CopyItem* items, size_t n, double factor, cudaStream_t stream) {
    return copy_typed<T>(items, n, factor, stream);
  }
};

}  // namespace

cudaError_t scale_buffer(void* buf, size_t count, int dtype, double factor, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return dispatch<ScaleOp>(dtype, buf, count, factor, stream);
}

cudaError_t batched_scaled_copy(const CopyItem* items, size_t n, int dtype, double factor,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch<CopyOp>(dtype, items, n, factor, stream);
}

}  // namespace hvd_nccl
