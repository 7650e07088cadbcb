// See gpu.h. Only builds with tensor_ops=nccl (HVD_HAVE_NCCL) look for the
// plugin; other builds explain that they are CPU-only.
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"
#include "gpu.h"
#include "state.h"

namespace hvd {

// The plugin's numbering is the core's (nccl_plugin.h says so; this checks it).
static_assert(HVD_PLUGIN_ERR_INVALID == static_cast<int>(HVD_ERR_INVALID) &&
                  HVD_PLUGIN_ERR_TIMEOUT == static_cast<int>(HVD_ERR_TIMEOUT) &&
                  HVD_PLUGIN_ERR_PEER == static_cast<int>(HVD_ERR_PEER) &&
                  HVD_PLUGIN_ERR_INTERNAL == static_cast<int>(HVD_ERR_INTERNAL),
              "plugin status codes");
static_assert(HVD_PLUGIN_FLOAT16 == static_cast<int>(HVD_FLOAT16) &&
                  HVD_PLUGIN_BFLOAT16 == static_cast<int>(HVD_BFLOAT16) &&
                  HVD_PLUGIN_FLOAT32 == static_cast<int>(HVD_FLOAT32) &&
                  HVD_PLUGIN_FLOAT64 == static_cast<int>(HVD_FLOAT64) &&
                  HVD_PLUGIN_INT32 == static_cast<int>(HVD_INT32) &&
                  HVD_PLUGIN_INT64 == static_cast<int>(HVD_INT64) &&
                  HVD_PLUGIN_UINT8 == static_cast<int>(HVD_UINT8) &&
                  HVD_PLUGIN_INT8 == static_cast<int>(HVD_INT8) &&
                  HVD_PLUGIN_INT16 == static_cast<int>(HVD_INT16) &&
                  HVD_PLUGIN_BOOL == static_cast<int>(HVD_BOOL),
              "plugin dtype codes");
static_assert(HVD_PLUGIN_SUM == static_cast<int>(HVD_SUM) &&
                  HVD_PLUGIN_AVERAGE == static_cast<int>(HVD_AVERAGE) &&
                  HVD_PLUGIN_MIN == static_cast<int>(HVD_MIN) &&
                  HVD_PLUGIN_MAX == static_cast<int>(HVD_MAX) &&
                  HVD_PLUGIN_PRODUCT == static_cast<int>(HVD_PRODUCT),
              "plugin op codes");

namespace {

std::atomic<bool> g_peer_failed{false};  // a peer failed or timed out since init
std::atomic<bool> g_failed_ever{false};  // ... since the process started

}  // namespace

void note_peer_failure() {
  g_peer_failed = true;
  g_failed_ever = true;
}

bool collective_failed_ever() { return g_failed_ever; }

namespace gpu {
namespace {

std::mutex g_mutex;  // one plugin call at a time; held while the communicator is made
const hvd_nccl_plugin* g_plugin = nullptr;
bool g_tried = false;
bool g_comm_ready = false;
std::string g_reason;  // why the plugin cannot be used
std::string g_broken;  // why GPU operations stopped (a peer failed or timed out)
double g_timeout_s = 60.0;

std::string core_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_directory), &info) == 0 || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

void load_locked() {
  if (g_tried) return;
  g_tried = true;
#ifndef HVD_HAVE_NCCL
  // hvd_selector adds the command that fits
  g_reason = std::string("this build is CPU-only (") + variant_string() + ")";
  return;
#else
  std::string path = core_directory() + "/libhvd_nccl.so";
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    g_reason = std::string("cannot load ") + path + ": " + (why ? why : "unknown dlopen error");
    return;
  }
  auto get = reinterpret_cast<hvd_nccl_plugin_get_fn>(dlsym(handle, "hvd_nccl_plugin_get"));
  if (!get) {
    g_reason = path + " has no hvd_nccl_plugin_get symbol";
    return;
  }
  const hvd_nccl_plugin* p = get();
  if (!p || p->abi_version != HVD_NCCL_PLUGIN_ABI) {
    g_reason = path + " speaks plugin ABI " + std::to_string(p ? p->abi_version : -1) + ", core expects " +
               std::to_string(HVD_NCCL_PLUGIN_ABI) + "; reinstall hvd-selector";
    return;
  }
  if (p->device_count() <= 0) {
    g_reason = std::string("no CUDA device visible (") + (p->last_error ? p->last_error() : "") + ")";
    return;
  }
  g_plugin = p;
#endif
}

const hvd_nccl_plugin& loaded_locked() {
  load_locked();
  if (!g_plugin) throw Error(HVD_ERR_UNAVAILABLE, "GPU operations unavailable: " + g_reason);
  return *g_plugin;
}

int device_locked(const Backend& cpu) { return cpu.local_rank() % loaded_locked().device_count(); }

hvd_status status_of(int rc) {
  switch (rc) {
    case HVD_PLUGIN_ERR_INVALID:
    case HVD_PLUGIN_ERR_TIMEOUT:
    case HVD_PLUGIN_ERR_PEER: return static_cast<hvd_status>(rc);
    default: return HVD_ERR_INTERNAL;
  }
}

// A failed plugin call: an Error with the plugin's reason. A peer failure or
// timeout leaves the communicator aborted (the plugin's contract), so GPU
// operations stop here too until shutdown() and init().
[[noreturn]] void fail(int rc, const std::string& what) {
  hvd_status status = status_of(rc);
  std::string message = what + " (GPU): " + g_plugin->last_error();
  if (status == HVD_ERR_PEER || status == HVD_ERR_TIMEOUT) {
    g_broken = message;
    note_peer_failure();
  }
  throw Error(status, message);
}

// What each rank tells the others before the communicator is made.
struct Ready {
  int32_t ok;
  int32_t reserved;
  char unique_id[HVD_NCCL_UNIQUE_ID_BYTES];  // rank 0's
  char reason[248];                          // why not, when !ok
};
static_assert(sizeof(Ready) % 8 == 0, "Ready travels as raw bytes");

// Makes the communicator: every rank says whether it can (rank 0 with the
// NCCL unique id), in one allgather over the CPU communicator, so a rank that
// cannot makes every rank fail with its reason instead of the others waiting;
// then every rank joins (within the timeout).
void make_communicator_locked(Backend& cpu) {
  const hvd_nccl_plugin& p = *g_plugin;
  Ready mine{};
  mine.ok = 1;
  if (cpu.rank() == 0) {
    if (p.get_unique_id(mine.unique_id) != 0) {
      mine.ok = 0;
      std::strncpy(mine.reason, (std::string("nccl unique id: ") + p.last_error()).c_str(),
                   sizeof(mine.reason) - 1);
    }
  }
  std::vector<Ready> all(static_cast<size_t>(cpu.size()));
  cpu.allgather(&mine, all.data(), sizeof(Ready));
  for (int r = 0; r < cpu.size(); ++r)
    if (!all[r].ok)
      throw Error(HVD_ERR_UNAVAILABLE,
                  "GPU operations unavailable: rank " + std::to_string(r) + ": " +
                      std::string(all[r].reason, strnlen(all[r].reason, sizeof(all[r].reason))));
  if (int rc = p.init(cpu.rank(), cpu.size(), all[0].unique_id, device_locked(cpu), g_timeout_s)) {
    hvd_status status = status_of(rc);
    if (status == HVD_ERR_PEER || status == HVD_ERR_TIMEOUT) fail(rc, "nccl init");
    throw Error(HVD_ERR_UNAVAILABLE, std::string("GPU operations unavailable: nccl init: ") + p.last_error());
  }
  g_comm_ready = true;
}

}  // namespace

std::string unavailable_reason() {
  std::lock_guard<std::mutex> lock(g_mutex);
  load_locked();
  return g_plugin ? "" : g_reason;
}

void check(Backend& cpu, const char* what, std::initializer_list<const hvd_tensor*> tensors) {
  std::lock_guard<std::mutex> lock(g_mutex);
  loaded_locked();
  if (current_process_set() != 0)
    throw Error(HVD_ERR_UNAVAILABLE, std::string(what) +
                                         ": GPU tensors are served on the global communicator only, not in "
                                         "process sets");
  const int device = device_locked(cpu);
  for (const hvd_tensor* t : tensors)
    if (t->device == HVD_DEVICE_CUDA && t->device_id != device)
      throw Error(HVD_ERR_INVALID,
                  std::string(what) + ": the tensor is on CUDA device " + std::to_string(t->device_id) +
                      " but this rank's communicator uses device " + std::to_string(device) +
                      " (local_rank % device count); call torch.cuda.set_device(local_rank())");
}

int compute_capability(const Backend& cpu, int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const hvd_nccl_plugin& p = loaded_locked();
  if (device < 0) device = device_locked(cpu);
  int cc = 0;
  if (int rc = p.compute_capability(device, &cc)) fail(rc, "compute capability");
  return cc;
}

void run(Backend& cpu, const char* what, const std::function<int(const hvd_nccl_plugin&)>& call) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const hvd_nccl_plugin& p = loaded_locked();
  if (!g_broken.empty())
    throw Error(HVD_ERR_PEER, std::string(what) + ": GPU operations stopped after an earlier failure (" +
                                  g_broken + "); call shutdown() and init() again");
  if (!g_comm_ready) make_communicator_locked(cpu);
  int rc = call(p);
  if (rc == 0) rc = p.synchronize(nullptr);
  if (rc != 0) fail(rc, what);
}

void configure(double timeout_s) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_timeout_s = timeout_s > 0 ? timeout_s : 60.0;
  g_peer_failed = false;
}

void shutdown() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_plugin) {  // also after a unique id was made but the communicator never was
    if (g_comm_ready && (g_peer_failed || !g_broken.empty())) g_plugin->abort();  // nobody to leave with
    g_plugin->finalize();
  }
  g_comm_ready = false;
  g_broken.clear();
  g_peer_failed = false;
}

}  // namespace gpu
}  // namespace hvd

extern "C" const char* hvd_gpu_unavailable_reason(void) {
  static thread_local std::string reason;
  reason = hvd::gpu::unavailable_reason();
  return reason.c_str();
}
