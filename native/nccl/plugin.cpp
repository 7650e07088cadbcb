// libhvd_nccl.so: the CUDA + NCCL half of the collective library.
//
// The core dlopen()s this library on the first GPU operation, so nothing here
// may run at load time that needs a GPU: the CUDA runtime is linked statically
// and only touches the driver (libcuda.so.1) when a function below is called.
// Every failure becomes a one-line reason in last_error().
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd/nccl_plugin.h"
#include "kernels.h"

namespace {

thread_local std::string g_last_error;

int fail(std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  g_last_error = std::move(message);
  return 1;
}

// Why the GPU side cannot work on this machine, or "" when it can.
std::string driver_problem() {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    cudaGetLastError();
    return "no NVIDIA driver found (libcuda.so.1 could not be loaded): install the NVIDIA driver "
           "or use a CPU variant";
  }
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  if (driver < runtime) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "the NVIDIA driver supports CUDA %d.%d but this build needs CUDA %d.%d: update the "
                  "driver or install a variant built for an older CUDA line",
                  driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
    return buf;
  }
  return "";
}

// The function name of a CUDA_TRY/NCCL_TRY expression ("cudaMalloc(&p, n)" -> "cudaMalloc").
std::string call_name(const char* what) {
  std::string name(what);
  return name.substr(0, name.find('('));
}

int cuda_fail(const std::string& what, cudaError_t err) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  std::string code = what + ": " + cudaGetErrorName(err);
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
    std::string problem = driver_problem();
    if (!problem.empty()) return fail(problem + " [" + code + "]");
  }
  std::string message = code + ": " + cudaGetErrorString(err);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidPtx ||
      err == cudaErrorUnsupportedPtxVersion) {
    message +=
        " (this variant was not built for this GPU's compute capability: install the variant "
        "the selector picks for this machine)";
  }
  return fail(message);
}

struct State {
  std::mutex mu;
  ncclComm_t comm = nullptr;
  int rank = 0;
  int size = 0;
  int device = -1;
  cudaStream_t stream = nullptr;
  void* fusion = nullptr;
  size_t fusion_bytes = 0;
  cudaEvent_t fusion_free = nullptr;  // recorded after each unpack: the fusion buffer is reusable
};

State g_state;

int nccl_fail(const std::string& what, ncclResult_t res) {
  std::string message = what + " failed: " + ncclGetErrorString(res);
  const char* detail = g_state.comm ? ncclGetLastError(g_state.comm) : ncclGetLastError(nullptr);
  if (detail && *detail) message += std::string(" (") + detail + ")";
  return fail(message);
}

#define CUDA_TRY(call)                                                 \
  do {                                                                 \
    cudaError_t err_ = (call);                                         \
    if (err_ != cudaSuccess) return cuda_fail(call_name(#call), err_); \
  } while (0)

#define NCCL_TRY(call)                                                 \
  do {                                                                 \
    ncclResult_t res_ = (call);                                        \
    if (res_ != ncclSuccess) return nccl_fail(call_name(#call), res_); \
  } while (0)

size_t element_size(int dtype) {
  switch (dtype) {
    case HVD_PLUGIN_FLOAT16:
    case HVD_PLUGIN_BFLOAT16: return 2;
    case HVD_PLUGIN_FLOAT32:
    case HVD_PLUGIN_INT32: return 4;
    case HVD_PLUGIN_FLOAT64:
    case HVD_PLUGIN_INT64: return 8;
    default: return 0;
  }
}

bool nccl_dtype(int dtype, ncclDataType_t* out) {
  switch (dtype) {
    case HVD_PLUGIN_FLOAT16: *out = ncclFloat16; return true;
    case HVD_PLUGIN_BFLOAT16: *out = ncclBfloat16; return true;
    case HVD_PLUGIN_FLOAT32: *out = ncclFloat32; return true;
    case HVD_PLUGIN_FLOAT64: *out = ncclFloat64; return true;
    case HVD_PLUGIN_INT32: *out = ncclInt32; return true;
    case HVD_PLUGIN_INT64: *out = ncclInt64; return true;
    default: return false;
  }
}

bool nccl_op(int op, ncclRedOp_t* out) {
  switch (op) {
    case HVD_PLUGIN_SUM:
    case HVD_PLUGIN_AVERAGE: *out = ncclSum; return true;
    case HVD_PLUGIN_MIN: *out = ncclMin; return true;
    case HVD_PLUGIN_MAX: *out = ncclMax; return true;
    case HVD_PLUGIN_PRODUCT: *out = ncclProd; return true;
    default: return false;
  }
}

// What a collective passes to NCCL, checked once by begin().
struct Launch {
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t red = ncclSum;
  cudaStream_t stream = nullptr;
};

// Common preamble of every collective: initialized, valid dtype, right device.
int begin(int dtype, void* stream, Launch* out) {
  if (!g_state.comm) return fail("the NCCL communicator is not initialized: call init() first");
  if (!nccl_dtype(dtype, &out->type)) return fail("unknown dtype " + std::to_string(dtype));
  CUDA_TRY(cudaSetDevice(g_state.device));
  out->stream = stream ? static_cast<cudaStream_t>(stream) : g_state.stream;
  return 0;
}

// begin() plus a valid reduction op.
int begin_reduction(int dtype, int op, void* stream, Launch* out) {
  if (int rc = begin(dtype, stream, out)) return rc;
  if (!nccl_op(op, &out->red)) return fail("unknown reduction op " + std::to_string(op));
  return 0;
}

// The postscale an op needs: AVERAGE divides by the number of ranks.
double effective_postscale(int op, double postscale) {
  return op == HVD_PLUGIN_AVERAGE ? postscale / g_state.size : postscale;
}

// ncclGroupEnd must follow ncclGroupStart even when a call inside fails.
template <typename Body>
int in_group(const char* what, Body body) {
  NCCL_TRY(ncclGroupStart());
  ncclResult_t inner = body();
  ncclResult_t end = ncclGroupEnd();
  if (inner != ncclSuccess) return nccl_fail(what, inner);
  if (end != ncclSuccess) return nccl_fail("ncclGroupEnd", end);
  return 0;
}

int ensure_fusion(size_t bytes) {
  if (bytes <= g_state.fusion_bytes) return 0;
  if (g_state.fusion) {
    CUDA_TRY(cudaEventSynchronize(g_state.fusion_free));
    CUDA_TRY(cudaFree(g_state.fusion));
    g_state.fusion = nullptr;
    g_state.fusion_bytes = 0;
  }
  size_t rounded = (bytes + (1u << 20) - 1) & ~static_cast<size_t>((1u << 20) - 1);
  CUDA_TRY(cudaMalloc(&g_state.fusion, rounded));
  g_state.fusion_bytes = rounded;
  return 0;
}

// ------------------------------------------------------------ entry points
const char* last_error() { return g_last_error.c_str(); }

const char* versions() {
  static std::once_flag once;
  static char text[128];
  std::call_once(once, [] {
    int runtime = 0, driver = 0, nccl = 0;
    cudaRuntimeGetVersion(&runtime);
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    cudaGetLastError();
    ncclGetVersion(&nccl);
    char driver_text[32] = "none";
    if (driver > 0)
      std::snprintf(driver_text, sizeof driver_text, "%d.%d", driver / 1000, (driver % 1000) / 10);
    std::snprintf(text, sizeof text, "cuda_runtime=%d.%d cuda_driver=%s nccl=%d.%d.%d", runtime / 1000,
                  (runtime % 1000) / 10, driver_text, nccl / 10000, (nccl % 10000) / 100, nccl % 100);
  });
  return text;
}

int device_count() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cuda_fail("cudaGetDeviceCount", err);  // leaves the reason in last_error()
    return 0;
  }
  if (count == 0) fail("no CUDA device is visible (check CUDA_VISIBLE_DEVICES)");
  return count;
}

int compute_capability(int device, int* cc_out) {
  if (!cc_out) return fail("compute_capability: cc_out is NULL");
  int major = 0, minor = 0;
  CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  *cc_out = major * 10 + minor;
  return 0;
}

int get_unique_id(void* out) {
  if (!out) return fail("get_unique_id: out is NULL");
  static_assert(sizeof(ncclUniqueId) == HVD_NCCL_UNIQUE_ID_BYTES, "NCCL unique id size changed");
  ncclUniqueId id;
  NCCL_TRY(ncclGetUniqueId(&id));
  std::memcpy(out, &id, sizeof id);
  return 0;
}

int finalize_locked() {
  if (!g_state.comm && !g_state.stream) return 0;  // never initialized, or already finalized
  int status = 0;
  cudaSetDevice(g_state.device);
  if (g_state.stream) {
    cudaError_t err = cudaStreamSynchronize(g_state.stream);
    if (err != cudaSuccess) status = cuda_fail("cudaStreamSynchronize", err);
  }
  if (g_state.comm) {  // NULL after synchronize() aborted it
    ncclResult_t res = ncclCommDestroy(g_state.comm);
    g_state.comm = nullptr;
    if (res != ncclSuccess && status == 0) status = nccl_fail("ncclCommDestroy", res);
  }
  if (g_state.fusion) cudaFree(g_state.fusion);
  if (g_state.fusion_free) cudaEventDestroy(g_state.fusion_free);
  if (g_state.stream) cudaStreamDestroy(g_state.stream);
  g_state.fusion = nullptr;
  g_state.fusion_bytes = 0;
  g_state.fusion_free = nullptr;
  g_state.stream = nullptr;
  g_state.device = -1;
  cudaGetLastError();
  return status;
}

int init(int rank, int size, const void* unique_id, int device) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  if (g_state.comm) return fail("init: the NCCL communicator is already initialized: call finalize() first");
  if (!unique_id) return fail("init: unique_id is NULL");
  finalize_locked();  // drops what an aborted communicator left behind
  if (size < 1 || rank < 0 || rank >= size) {
    return fail("init: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size) + ")");
  }
  int count = device_count();
  if (count == 0) return fail(std::string("init: no CUDA device: ") + g_last_error);
  if (device < 0 || device >= count) {
    return fail("init: device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                " visible)");
  }
  CUDA_TRY(cudaSetDevice(device));
  ncclUniqueId id;
  std::memcpy(&id, unique_id, sizeof id);
  ncclComm_t comm = nullptr;
  NCCL_TRY(ncclCommInitRank(&comm, size, id, rank));
  g_state.comm = comm;
  g_state.rank = rank;
  g_state.size = size;
  g_state.device = device;
  cudaError_t err = cudaStreamCreateWithFlags(&g_state.stream, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&g_state.fusion_free, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    int status = cuda_fail("creating the plugin's stream", err);
    std::string reason = g_last_error;
    finalize_locked();
    g_last_error = reason;
    return status;
  }
  return 0;
}

int finalize() {
  std::lock_guard<std::mutex> lock(g_state.mu);
  return finalize_locked();
}

int allreduce(void* device_buf, size_t count, int dtype, int op, double prescale, double postscale,
              void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  if (int rc = begin_reduction(dtype, op, stream, &l)) return rc;
  if (count == 0) return 0;
  if (prescale != 1.0) CUDA_TRY(hvd_nccl::scale_buffer(device_buf, count, dtype, prescale, l.stream));
  NCCL_TRY(ncclAllReduce(device_buf, device_buf, count, l.type, l.red, g_state.comm, l.stream));
  double post = effective_postscale(op, postscale);
  if (post != 1.0) CUDA_TRY(hvd_nccl::scale_buffer(device_buf, count, dtype, post, l.stream));
  return 0;
}

int grouped_allreduce(void* const* device_bufs, const size_t* counts, size_t n, int dtype, int op,
                      double prescale, double postscale, void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  if (int rc = begin_reduction(dtype, op, stream, &l)) return rc;
  if (n == 0) return 0;
  if (!device_bufs || !counts) return fail("grouped_allreduce: device_bufs or counts is NULL");
  size_t elem = element_size(dtype);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += counts[i];
  if (total == 0) return 0;
  if (int rc = ensure_fusion(total * elem)) return rc;
  // The previous grouped call (maybe on another stream) must be done with the buffer.
  CUDA_TRY(cudaStreamWaitEvent(l.stream, g_state.fusion_free, 0));
  std::vector<hvd_nccl::CopyItem> pack, unpack;
  pack.reserve(n);
  unpack.reserve(n);
  char* fusion = static_cast<char*>(g_state.fusion);
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    if (counts[i] == 0) continue;
    pack.push_back({device_bufs[i], fusion + offset, counts[i]});
    unpack.push_back({fusion + offset, device_bufs[i], counts[i]});
    offset += counts[i] * elem;
  }
  CUDA_TRY(hvd_nccl::batched_scaled_copy(pack.data(), pack.size(), dtype, prescale, l.stream));
  NCCL_TRY(ncclAllReduce(fusion, fusion, total, l.type, l.red, g_state.comm, l.stream));
  CUDA_TRY(hvd_nccl::batched_scaled_copy(unpack.data(), unpack.size(), dtype,
                                         effective_postscale(op, postscale), l.stream));
  CUDA_TRY(cudaEventRecord(g_state.fusion_free, l.stream));
  return 0;
}

int allgatherv(const void* send, void* recv, const size_t* recv_counts, int dtype, void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  if (int rc = begin(dtype, stream, &l)) return rc;
  if (!recv_counts) return fail("allgatherv: recv_counts is NULL");
  size_t elem = element_size(dtype);
  bool equal = true;
  for (int r = 1; r < g_state.size; ++r) equal = equal && recv_counts[r] == recv_counts[0];
  if (equal) {
    if (recv_counts[0] == 0) return 0;
    NCCL_TRY(ncclAllGather(send, recv, recv_counts[0], l.type, g_state.comm, l.stream));
    return 0;
  }
  // Uneven counts: one broadcast per rank, fused by a group (Horovod's way).
  return in_group("allgatherv (grouped ncclBroadcast)", [&] {
    size_t offset = 0;
    for (int r = 0; r < g_state.size; ++r) {
      if (recv_counts[r] > 0) {
        char* dst = static_cast<char*>(recv) + offset * elem;
        ncclResult_t res = ncclBroadcast(r == g_state.rank ? send : dst, dst, recv_counts[r], l.type, r,
                                         g_state.comm, l.stream);
        if (res != ncclSuccess) return res;
      }
      offset += recv_counts[r];
    }
    return ncclSuccess;
  });
}

int broadcast(void* device_buf, size_t count, int dtype, int root, void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  if (int rc = begin(dtype, stream, &l)) return rc;
  if (root < 0 || root >= g_state.size) {
    return fail("broadcast: root " + std::to_string(root) + " is not in [0, " + std::to_string(g_state.size) +
                ")");
  }
  if (count == 0) return 0;
  NCCL_TRY(ncclBroadcast(device_buf, device_buf, count, l.type, root, g_state.comm, l.stream));
  return 0;
}

int alltoallv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts, int dtype,
              void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  if (int rc = begin(dtype, stream, &l)) return rc;
  if (!send_counts || !recv_counts) return fail("alltoallv: send_counts or recv_counts is NULL");
  size_t elem = element_size(dtype);
  return in_group("alltoallv (grouped ncclSend/ncclRecv)", [&] {
    size_t send_offset = 0, recv_offset = 0;
    for (int r = 0; r < g_state.size; ++r) {
      if (send_counts[r] > 0) {
        ncclResult_t res = ncclSend(static_cast<const char*>(send) + send_offset * elem, send_counts[r],
                                    l.type, r, g_state.comm, l.stream);
        if (res != ncclSuccess) return res;
      }
      if (recv_counts[r] > 0) {
        ncclResult_t res = ncclRecv(static_cast<char*>(recv) + recv_offset * elem, recv_counts[r], l.type, r,
                                    g_state.comm, l.stream);
        if (res != ncclSuccess) return res;
      }
      send_offset += send_counts[r];
      recv_offset += recv_counts[r];
    }
    return ncclSuccess;
  });
}

// Polls instead of blocking so a failed peer surfaces as an NCCL error
// instead of a hang.
int synchronize(void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  if (!g_state.comm) return fail("the NCCL communicator is not initialized: call init() first");
  CUDA_TRY(cudaSetDevice(g_state.device));
  cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : g_state.stream;
  for (;;) {
    cudaError_t err = cudaStreamQuery(s);
    if (err == cudaSuccess) return 0;
    if (err != cudaErrorNotReady) return cuda_fail("cudaStreamQuery", err);
    ncclResult_t async = ncclSuccess;
    NCCL_TRY(ncclCommGetAsyncError(g_state.comm, &async));
    if (async != ncclSuccess) {
      int status = nccl_fail("NCCL asynchronous error (communicator aborted)", async);
      ncclCommAbort(g_state.comm);
      g_state.comm = nullptr;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

const hvd_nccl_plugin kPlugin = {
    HVD_NCCL_PLUGIN_ABI, last_error, versions,  device_count, compute_capability,
    get_unique_id,       init,       finalize,  allreduce,    grouped_allreduce,
    allgatherv,          broadcast,  alltoallv, synchronize,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const hvd_nccl_plugin* hvd_nccl_plugin_get(void) {
  return &kPlugin;
}
