// libhvd_nccl.so: the CUDA + NCCL half of the collective library (ABI 2,
// hvd/nccl_plugin.h).
//
// The core dlopen()s this library on the first GPU operation, so nothing here
// may run at load time that needs a GPU: the CUDA runtime is linked statically
// and only touches the driver (libcuda.so.1) when a function below is called.
// Every failure becomes a one-line reason in last_error() and a status code.
//
// Reductions run as plan.h decides (NCCL's types, int16 through 32-bit
// integers, bool as uint8 max/min, a prescale folded into an NCCL PreMulSum
// where that gives the CPU path's result); allgather, broadcast and alltoall
// move bytes.
//
// Peer failure: the communicator is nonblocking (ncclConfig_t.blocking = 0),
// so no NCCL call blocks: each is polled with ncclCommGetAsyncError until it
// settles or the job's timeout passes, and synchronize() polls the stream the
// same way. A rank that never joins init(), a peer that dies during a
// collective (NCCL's asynchronous error) or a collective that does not finish
// in time ends in an error code, and the communicator is aborted
// (ncclCommAbort: it waits for nobody) instead of hanging or being destroyed
// later with a dead peer (ncclCommDestroy would wait for it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd/nccl_plugin.h"
#include "kernels.h"
#include "plan.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::microseconds kPoll{50};
constexpr double kDefaultTimeout = 60.0;

thread_local std::string g_last_error;

int fail(int code, std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  g_last_error = std::move(message);
  return code;
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
    if (!problem.empty()) return fail(HVD_PLUGIN_ERR_INTERNAL, problem + " [" + code + "]");
  }
  std::string message = code + ": " + cudaGetErrorString(err);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidPtx ||
      err == cudaErrorUnsupportedPtxVersion) {
    message +=
        " (this variant was not built for this GPU's compute capability: install the variant "
        "the selector picks for this machine)";
  }
  return fail(HVD_PLUGIN_ERR_INTERNAL, message);
}

struct State {
  std::mutex mu;
  ncclComm_t comm = nullptr;
  std::string aborted;  // why the communicator was aborted ("" while usable or never made)
  int rank = 0;
  int size = 0;
  int device = -1;
  double timeout_s = kDefaultTimeout;
  bool premulsum = true;  // HVD_SELECTOR_NCCL_PREMULSUM=0: scale prescales in a separate pass
  cudaStream_t stream = nullptr;
  void* fusion = nullptr;
  size_t fusion_bytes = 0;
  cudaEvent_t fusion_free = nullptr;  // recorded after each use: the fusion buffer is reusable
  cudaEvent_t produced = nullptr;     // recorded on the legacy default stream before each collective
};

State g_state;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// Aborts the communicator (it waits for nobody) and fails with `code`; every
// later collective fails with the same reason until finalize() and init().
int abort_with(int code, const std::string& reason) {
  if (g_state.comm) ncclCommAbort(g_state.comm);
  g_state.comm = nullptr;
  g_state.aborted = reason;
  return fail(code, reason);
}

// The outcome of a call on the nonblocking communicator `comm`: polled while
// NCCL reports ncclInProgress, until it settles or the timeout passes
// (ncclInProgress is returned then). `async` says the error came from
// ncclCommGetAsyncError (the communicator failed, most likely a peer).
ncclResult_t settle(ncclComm_t comm, ncclResult_t res, bool* async) {
  *async = false;
  if (res != ncclInProgress) return res;
  const auto until = Clock::now() + std::chrono::duration<double>(g_state.timeout_s);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    if (query != ncclSuccess) return query;
    if (state != ncclInProgress) {
      *async = state != ncclSuccess;
      return state;
    }
    if (Clock::now() >= until) return ncclInProgress;
    std::this_thread::sleep_for(kPoll);
  }
}

// An NCCL call that did not succeed: a timeout or an asynchronous (peer)
// failure aborts the communicator; a bad argument leaves it usable.
int nccl_fail(const std::string& what, ncclResult_t res, bool async) {
  if (res == ncclInProgress) {
    return abort_with(
        HVD_PLUGIN_ERR_TIMEOUT,
        what + " did not finish within " + seconds(g_state.timeout_s) +
            " s (a peer died, hangs or cannot be reached; raise HVD_SELECTOR_TIMEOUT if ranks are "
            "just slow)");
  }
  std::string message = what + " failed: " + ncclGetErrorString(res);
  const char* detail = ncclGetLastError(g_state.comm);
  if (detail && *detail) message += std::string(" (") + detail + ")";
  if (res == ncclInvalidArgument || res == ncclInvalidUsage) return fail(HVD_PLUGIN_ERR_INVALID, message);
  if (async || res == ncclRemoteError) return abort_with(HVD_PLUGIN_ERR_PEER, message);
  return abort_with(HVD_PLUGIN_ERR_INTERNAL, message);  // NCCL's advice after any error: abort
}

#define CUDA_TRY(call)                                                 \
  do {                                                                 \
    cudaError_t err_ = (call);                                         \
    if (err_ != cudaSuccess) return cuda_fail(call_name(#call), err_); \
  } while (0)

// A call on the communicator, settled (see settle()).
#define NCCL_TRY(call)                                                         \
  do {                                                                         \
    bool async_ = false;                                                       \
    ncclResult_t res_ = settle(g_state.comm, (call), &async_);                 \
    if (res_ != ncclSuccess) return nccl_fail(call_name(#call), res_, async_); \
  } while (0)

ncclDataType_t nccl_type(hvd_nccl::Wire wire) {
  switch (wire) {
    case hvd_nccl::Wire::Uint8: return ncclUint8;
    case hvd_nccl::Wire::Int8: return ncclInt8;
    case hvd_nccl::Wire::Int32: return ncclInt32;
    case hvd_nccl::Wire::Uint32: return ncclUint32;
    case hvd_nccl::Wire::Int64: return ncclInt64;
    case hvd_nccl::Wire::Float16: return ncclFloat16;
    case hvd_nccl::Wire::Bfloat16: return ncclBfloat16;
    case hvd_nccl::Wire::Float32: return ncclFloat32;
    case hvd_nccl::Wire::Float64: return ncclFloat64;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(hvd_nccl::Red red) {
  switch (red) {
    case hvd_nccl::Red::Prod: return ncclProd;
    case hvd_nccl::Red::Min: return ncclMin;
    case hvd_nccl::Red::Max: return ncclMax;
    default: return ncclSum;
  }
}

// The reduction op of `plan`: NCCL's own, or a PreMulSum made for this call
// (`made` true: destroy it after the collective).
int reduction_op(const hvd_nccl::Plan& plan, ncclRedOp_t* op, bool* made) {
  *made = false;
  if (plan.red != hvd_nccl::Red::PreMulSum) {
    *op = nccl_op(plan.red);
    return 0;
  }
  // The scalar in the reduction's own type (float16: rounded there, as the
  // kernel pass rounds it; bfloat16: exact there, plan.h checked).
  float f32 = static_cast<float>(plan.premul);
  double f64 = plan.premul;
  __half f16 = __float2half(f32);
  __nv_bfloat16 bf16 = __float2bfloat16(f32);
  void* scalar = &f32;
  if (plan.wire == hvd_nccl::Wire::Float64) scalar = &f64;
  if (plan.wire == hvd_nccl::Wire::Float16) scalar = &f16;
  if (plan.wire == hvd_nccl::Wire::Bfloat16) scalar = &bf16;
  NCCL_TRY(ncclRedOpCreatePreMulSum(op, scalar, nccl_type(plan.wire), ncclScalarHostImmediate, g_state.comm));
  *made = true;
  return 0;
}

// What a collective passes to NCCL, checked once by begin().
struct Launch {
  size_t elem = 0;  // bytes per element of the dtype
  cudaStream_t stream = nullptr;
};

// A communicator to work with, or why there is none.
int usable() {
  if (g_state.comm) return 0;
  if (!g_state.aborted.empty())
    return fail(HVD_PLUGIN_ERR_PEER, "the NCCL communicator was aborted after an earlier failure (" +
                                         g_state.aborted + "); finalize() and init() again");
  return fail(HVD_PLUGIN_ERR_INVALID, "the NCCL communicator is not initialized: call init() first");
}

// Common preamble of every collective: a usable communicator, a known dtype, the right device.
int begin(int dtype, void* stream, Launch* out) {
  if (int rc = usable()) return rc;
  out->elem = hvd_nccl::dtype_bytes(dtype);
  if (out->elem == 0) return fail(HVD_PLUGIN_ERR_INVALID, "unknown dtype " + std::to_string(dtype));
  CUDA_TRY(cudaSetDevice(g_state.device));
  out->stream = stream ? static_cast<cudaStream_t>(stream) : g_state.stream;
  if (!stream) {
    // The plugin's own stream does not synchronize with others: it first waits
    // for the work queued on the legacy default stream, where PyTorch (and
    // most code) computes tensors unless told otherwise, so NCCL reads them
    // complete. Work on other streams is the caller's to finish first.
    CUDA_TRY(cudaEventRecord(g_state.produced, cudaStreamLegacy));
    CUDA_TRY(cudaStreamWaitEvent(out->stream, g_state.produced, 0));
  }
  return 0;
}

// The plan of a reduction, or a failure for an unknown op.
int plan_for(int dtype, int op, double prescale, double postscale, bool fold, hvd_nccl::Plan* plan) {
  *plan = hvd_nccl::plan_reduction(dtype, op, prescale, postscale, g_state.size, fold && g_state.premulsum);
  if (plan->error) return fail(HVD_PLUGIN_ERR_INVALID, std::string(plan->error) + " " + std::to_string(op));
  return 0;
}

// ncclGroupEnd must follow ncclGroupStart even when a call inside fails.
template <typename Body>
int in_group(const char* what, Body body) {
  NCCL_TRY(ncclGroupStart());
  ncclResult_t inner = body();
  bool async = false;
  ncclResult_t end = settle(g_state.comm, ncclGroupEnd(), &async);
  if (inner != ncclSuccess) return nccl_fail(what, inner, false);
  if (end != ncclSuccess) return nccl_fail(what, end, async);
  return 0;
}

// The fusion buffer (also the 32-bit buffer of an int16 reduction), at
// least `bytes` large, free for work queued on `stream` from now on.
int take_fusion(size_t bytes, cudaStream_t stream) {
  if (bytes > g_state.fusion_bytes) {
    if (g_state.fusion) {
      CUDA_TRY(cudaEventSynchronize(g_state.fusion_free));
      CUDA_TRY(cudaFree(g_state.fusion));
      g_state.fusion = nullptr;
      g_state.fusion_bytes = 0;
    }
    size_t rounded = (bytes + (1u << 20) - 1) & ~static_cast<size_t>((1u << 20) - 1);
    CUDA_TRY(cudaMalloc(&g_state.fusion, rounded));
    g_state.fusion_bytes = rounded;
  }
  // The previous user (maybe on another stream) must be done with it.
  CUDA_TRY(cudaStreamWaitEvent(stream, g_state.fusion_free, 0));
  return 0;
}

// Waits (polling) for `stream`, at most the timeout; NCCL's asynchronous
// errors meanwhile abort the communicator.
int wait_stream(cudaStream_t stream, const char* what) {
  const auto until = Clock::now() + std::chrono::duration<double>(g_state.timeout_s);
  for (;;) {
    cudaError_t err = cudaStreamQuery(stream);
    if (err == cudaSuccess) return 0;
    if (err != cudaErrorNotReady) return cuda_fail("cudaStreamQuery", err);
    if (g_state.comm) {
      ncclResult_t async = ncclSuccess;
      ncclResult_t query = ncclCommGetAsyncError(g_state.comm, &async);
      if (query != ncclSuccess) return nccl_fail("ncclCommGetAsyncError", query, true);
      if (async != ncclSuccess && async != ncclInProgress)
        return nccl_fail(std::string(what) + ": NCCL asynchronous error (a peer died or the network failed)",
                         async, true);
    }
    if (Clock::now() >= until)
      return abort_with(HVD_PLUGIN_ERR_TIMEOUT,
                        std::string(what) + ": the GPU collective did not finish within " +
                            seconds(g_state.timeout_s) +
                            " s (a peer died or hangs; raise HVD_SELECTOR_TIMEOUT if ranks are just slow)");
    std::this_thread::sleep_for(kPoll);
  }
}

// Frees everything the plugin holds, leaving the communicator with its peers
// first when it is healthy (bounded by the timeout; aborted otherwise).
int finalize_locked() {
  int status = 0;
  if (g_state.device >= 0) cudaSetDevice(g_state.device);
  if (g_state.comm) {
    if (g_state.stream) status = wait_stream(g_state.stream, "finalize");
    if (g_state.comm) {  // still healthy: leave with the peers, then free locally
      bool async = false;
      ncclResult_t res = settle(g_state.comm, ncclCommFinalize(g_state.comm), &async);
      if (res != ncclSuccess) {
        status = nccl_fail("ncclCommFinalize", res, async);  // aborts
      } else {
        ncclCommDestroy(g_state.comm);
        g_state.comm = nullptr;
      }
    }
  }
  if (g_state.stream) cudaStreamSynchronize(g_state.stream);  // aborted work ends at once
  if (g_state.fusion) cudaFree(g_state.fusion);
  if (g_state.fusion_free) cudaEventDestroy(g_state.fusion_free);
  if (g_state.produced) cudaEventDestroy(g_state.produced);
  if (g_state.stream) cudaStreamDestroy(g_state.stream);
  g_state.fusion = nullptr;
  g_state.fusion_bytes = 0;
  g_state.fusion_free = nullptr;
  g_state.produced = nullptr;
  g_state.stream = nullptr;
  g_state.device = -1;
  g_state.aborted.clear();
  cudaGetLastError();
  return status;
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
  if (count == 0) fail(HVD_PLUGIN_ERR_INTERNAL, "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)");
  return count;
}

int compute_capability(int device, int* cc_out) {
  if (!cc_out) return fail(HVD_PLUGIN_ERR_INVALID, "compute_capability: cc_out is NULL");
  int major = 0, minor = 0;
  CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  *cc_out = major * 10 + minor;
  return 0;
}

int get_unique_id(void* out) {
  if (!out) return fail(HVD_PLUGIN_ERR_INVALID, "get_unique_id: out is NULL");
  static_assert(sizeof(ncclUniqueId) == HVD_NCCL_UNIQUE_ID_BYTES, "NCCL unique id size changed");
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess)
    return fail(HVD_PLUGIN_ERR_INTERNAL, std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(res));
  std::memcpy(out, &id, sizeof id);
  return 0;
}

int init(int rank, int size, const void* unique_id, int device, double timeout_s) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  if (g_state.comm)
    return fail(HVD_PLUGIN_ERR_INVALID,
                "init: the NCCL communicator is already initialized: call finalize() first");
  if (!unique_id) return fail(HVD_PLUGIN_ERR_INVALID, "init: unique_id is NULL");
  finalize_locked();  // drops what an aborted communicator left behind
  if (size < 1 || rank < 0 || rank >= size) {
    return fail(HVD_PLUGIN_ERR_INVALID,
                "init: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size) + ")");
  }
  int count = device_count();
  if (count == 0) return fail(HVD_PLUGIN_ERR_INTERNAL, std::string("init: no CUDA device: ") + g_last_error);
  if (device < 0 || device >= count) {
    return fail(HVD_PLUGIN_ERR_INVALID, "init: device " + std::to_string(device) + " does not exist (" +
                                            std::to_string(count) + " visible)");
  }
  g_state.timeout_s = timeout_s > 0 ? timeout_s : kDefaultTimeout;
  const char* premulsum = std::getenv("HVD_SELECTOR_NCCL_PREMULSUM");
  g_state.premulsum = !(premulsum && std::strcmp(premulsum, "0") == 0);
  CUDA_TRY(cudaSetDevice(device));
  ncclUniqueId id;
  std::memcpy(&id, unique_id, sizeof id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and every call return at once; settle() polls with the timeout
  ncclComm_t comm = nullptr;
  bool async = false;
  ncclResult_t res = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (comm) res = settle(comm, res, &async);
  if (res != ncclSuccess) {
    const char* last = ncclGetLastError(comm);
    std::string detail = last ? last : "";
    if (comm) ncclCommAbort(comm);
    if (res == ncclInProgress)
      return fail(HVD_PLUGIN_ERR_TIMEOUT, "init: not every rank joined the NCCL communicator within " +
                                              seconds(g_state.timeout_s) +
                                              " s (a rank died or cannot reach this one)");
    std::string message = std::string("ncclCommInitRankConfig failed: ") + ncclGetErrorString(res);
    if (!detail.empty()) message += " (" + detail + ")";
    return fail(async || res == ncclRemoteError ? HVD_PLUGIN_ERR_PEER : HVD_PLUGIN_ERR_INTERNAL, message);
  }
  g_state.comm = comm;
  g_state.rank = rank;
  g_state.size = size;
  g_state.device = device;
  cudaError_t err = cudaStreamCreateWithFlags(&g_state.stream, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&g_state.fusion_free, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&g_state.produced, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    int status = cuda_fail("creating the plugin's stream", err);
    std::string reason = g_last_error;
    abort_with(status, reason);
    finalize_locked();
    return fail(status, reason);
  }
  return 0;
}

int finalize() {
  std::lock_guard<std::mutex> lock(g_state.mu);
  return finalize_locked();
}

int abort_comm() {
  std::lock_guard<std::mutex> lock(g_state.mu);
  if (g_state.comm) abort_with(HVD_PLUGIN_ERR_PEER, "aborted by the caller");
  return 0;
}

int allreduce(const void* send, void* recv, size_t count, int dtype, int op, double prescale,
              double postscale, void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  hvd_nccl::Plan plan;
  if (int rc = begin(dtype, stream, &l)) return rc;
  if (int rc = plan_for(dtype, op, prescale, postscale, true, &plan)) return rc;
  if (count == 0) return 0;
  const void* in = send;
  void* out = recv;  // where NCCL reduces into: recv, or the 32-bit buffer of int16
  if (plan.widen) {
    if (int rc = take_fusion(count * hvd_nccl::wire_bytes(plan.wire), l.stream)) return rc;
    out = g_state.fusion;
    hvd_nccl::CopyItem widen{send, out, count};
    CUDA_TRY(hvd_nccl::batched_copy(&widen, 1, dtype, hvd_nccl::Convert::Widen16, plan.pre, l.stream));
    in = out;
  } else if (plan.pre != 1.0) {  // a scaled copy into recv, reduced there in place
    hvd_nccl::CopyItem scaled{send, recv, count};
    CUDA_TRY(hvd_nccl::batched_copy(&scaled, 1, dtype, hvd_nccl::Convert::Same, plan.pre, l.stream));
    in = recv;
  }
  ncclRedOp_t red;
  bool made = false;
  if (int rc = reduction_op(plan, &red, &made)) return rc;
  bool async = false;
  ncclResult_t res = settle(
      g_state.comm, ncclAllReduce(in, out, count, nccl_type(plan.wire), red, g_state.comm, l.stream), &async);
  if (made && res != ncclInProgress) ncclRedOpDestroy(red, g_state.comm);
  if (res != ncclSuccess) return nccl_fail("ncclAllReduce", res, async);
  if (plan.widen) {
    hvd_nccl::CopyItem narrow{out, recv, count};
    CUDA_TRY(hvd_nccl::batched_copy(&narrow, 1, dtype, hvd_nccl::Convert::Narrow16, plan.post, l.stream));
    CUDA_TRY(cudaEventRecord(g_state.fusion_free, l.stream));
  } else if (plan.post != 1.0) {
    hvd_nccl::CopyItem scaled{recv, recv, count};
    CUDA_TRY(hvd_nccl::batched_copy(&scaled, 1, dtype, hvd_nccl::Convert::Same, plan.post, l.stream));
  }
  return 0;
}

int grouped_allreduce(const void* const* sends, void* const* recvs, const size_t* counts, size_t n, int dtype,
                      int op, double prescale, double postscale, void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  hvd_nccl::Plan plan;
  if (int rc = begin(dtype, stream, &l)) return rc;
  // Packing is a copy anyway: the prescale rides in it, never in the reduction.
  if (int rc = plan_for(dtype, op, prescale, postscale, false, &plan)) return rc;
  if (n == 0) return 0;
  if (!sends || !recvs || !counts)
    return fail(HVD_PLUGIN_ERR_INVALID, "grouped_allreduce: sends, recvs or counts is NULL");
  const size_t wire = hvd_nccl::wire_bytes(plan.wire);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += counts[i];
  if (total == 0) return 0;
  if (int rc = take_fusion(total * wire, l.stream)) return rc;
  std::vector<hvd_nccl::CopyItem> pack, unpack;
  pack.reserve(n);
  unpack.reserve(n);
  char* fusion = static_cast<char*>(g_state.fusion);
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    if (counts[i] == 0) continue;
    pack.push_back({sends[i], fusion + offset, counts[i]});
    unpack.push_back({fusion + offset, recvs[i], counts[i]});
    offset += counts[i] * wire;
  }
  auto into = plan.widen ? hvd_nccl::Convert::Widen16 : hvd_nccl::Convert::Same;
  auto back = plan.widen ? hvd_nccl::Convert::Narrow16 : hvd_nccl::Convert::Same;
  CUDA_TRY(hvd_nccl::batched_copy(pack.data(), pack.size(), dtype, into, plan.pre, l.stream));
  NCCL_TRY(
      ncclAllReduce(fusion, fusion, total, nccl_type(plan.wire), nccl_op(plan.red), g_state.comm, l.stream));
  CUDA_TRY(hvd_nccl::batched_copy(unpack.data(), unpack.size(), dtype, back, plan.post, l.stream));
  CUDA_TRY(cudaEventRecord(g_state.fusion_free, l.stream));
  return 0;
}

int allgatherv(const void* send, void* recv, const size_t* recv_counts, int dtype, void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  if (int rc = begin(dtype, stream, &l)) return rc;
  if (!recv_counts) return fail(HVD_PLUGIN_ERR_INVALID, "allgatherv: recv_counts is NULL");
  bool equal = true;
  for (int r = 1; r < g_state.size; ++r) equal = equal && recv_counts[r] == recv_counts[0];
  if (equal) {
    if (recv_counts[0] == 0) return 0;
    NCCL_TRY(ncclAllGather(send, recv, recv_counts[0] * l.elem, ncclUint8, g_state.comm, l.stream));
    return 0;
  }
  // Uneven counts: one broadcast per rank, fused by a group (Horovod's way).
  return in_group("allgatherv (grouped ncclBroadcast)", [&] {
    size_t offset = 0;
    for (int r = 0; r < g_state.size; ++r) {
      size_t bytes = recv_counts[r] * l.elem;
      if (bytes > 0) {
        char* dst = static_cast<char*>(recv) + offset;
        ncclResult_t res =
            ncclBroadcast(r == g_state.rank ? send : dst, dst, bytes, ncclUint8, r, g_state.comm, l.stream);
        if (res != ncclSuccess) return res;
      }
      offset += bytes;
    }
    return ncclSuccess;
  });
}

int broadcast(void* device_buf, size_t count, int dtype, int root, void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  if (int rc = begin(dtype, stream, &l)) return rc;
  if (root < 0 || root >= g_state.size) {
    return fail(HVD_PLUGIN_ERR_INVALID, "broadcast: root " + std::to_string(root) + " is not in [0, " +
                                            std::to_string(g_state.size) + ")");
  }
  if (count == 0) return 0;
  NCCL_TRY(ncclBroadcast(device_buf, device_buf, count * l.elem, ncclUint8, root, g_state.comm, l.stream));
  return 0;
}

int alltoallv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts, int dtype,
              void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  Launch l;
  if (int rc = begin(dtype, stream, &l)) return rc;
  if (!send_counts || !recv_counts)
    return fail(HVD_PLUGIN_ERR_INVALID, "alltoallv: send_counts or recv_counts is NULL");
  return in_group("alltoallv (grouped ncclSend/ncclRecv)", [&] {
    size_t send_offset = 0, recv_offset = 0;
    for (int r = 0; r < g_state.size; ++r) {
      size_t send_bytes = send_counts[r] * l.elem, recv_bytes = recv_counts[r] * l.elem;
      if (send_bytes > 0) {
        ncclResult_t res = ncclSend(static_cast<const char*>(send) + send_offset, send_bytes, ncclUint8, r,
                                    g_state.comm, l.stream);
        if (res != ncclSuccess) return res;
      }
      if (recv_bytes > 0) {
        ncclResult_t res = ncclRecv(static_cast<char*>(recv) + recv_offset, recv_bytes, ncclUint8, r,
                                    g_state.comm, l.stream);
        if (res != ncclSuccess) return res;
      }
      send_offset += send_bytes;
      recv_offset += recv_bytes;
    }
    return ncclSuccess;
  });
}

int synchronize(void* stream) {
  std::lock_guard<std::mutex> lock(g_state.mu);
  if (int rc = usable()) return rc;
  CUDA_TRY(cudaSetDevice(g_state.device));
  return wait_stream(stream ? static_cast<cudaStream_t>(stream) : g_state.stream, "synchronize");
}

const hvd_nccl_plugin kPlugin = {
    HVD_NCCL_PLUGIN_ABI, last_error, versions,  device_count, compute_capability,
    get_unique_id,       init,       finalize,  abort_comm,   allreduce,
    grouped_allreduce,   allgatherv, broadcast, alltoallv,    synchronize,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const hvd_nccl_plugin* hvd_nccl_plugin_get(void) {
  return &kPlugin;
}
