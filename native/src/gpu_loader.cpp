// See gpu.h. Only builds with tensor_ops=nccl (HVD_HAVE_NCCL) look for the
// plugin; other builds explain that they are CPU-only.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "common.h"
#include "gpu.h"

#ifndef HVD_BUILD_STRING
#define HVD_BUILD_STRING "unknown"
#endif

namespace hvd::gpu {
namespace {

std::mutex g_mutex;
const hvd_nccl_plugin* g_plugin = nullptr;
bool g_tried = false;
bool g_comm_ready = false;
std::string g_reason;

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
  g_reason = "this build is CPU-only (" HVD_BUILD_STRING
             "); install a GPU variant: "
             "pip install --no-cache-dir --force-reinstall hvd-selector[gpu-nvidia]";
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

}  // namespace

void check(const hvd_nccl_plugin& p, int rc, const char* what) {
  if (rc != 0) throw Error(HVD_ERR_INTERNAL, std::string(what) + " (GPU): " + p.last_error());
}

std::string unavailable_reason() {
  std::lock_guard<std::mutex> lock(g_mutex);
  load_locked();
  return g_plugin ? "" : g_reason;
}

const hvd_nccl_plugin& plugin(Backend& cpu) {
  std::lock_guard<std::mutex> lock(g_mutex);
  load_locked();
  if (!g_plugin) throw Error(HVD_ERR_UNAVAILABLE, "GPU operations unavailable: " + g_reason);
  if (!g_comm_ready) {
    char id[HVD_NCCL_UNIQUE_ID_BYTES] = {0};
    if (cpu.rank() == 0) check(*g_plugin, g_plugin->get_unique_id(id), "nccl unique id");
    cpu.broadcast(id, sizeof(id), 0);
    int device = cpu.local_rank() % g_plugin->device_count();
    check(*g_plugin, g_plugin->init(cpu.rank(), cpu.size(), id, device), "nccl init");
    g_comm_ready = true;
  }
  return *g_plugin;
}

void shutdown() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_plugin && g_comm_ready) g_plugin->finalize();
  g_comm_ready = false;
}

}  // namespace hvd::gpu

extern "C" const char* hvd_gpu_unavailable_reason(void) {
  static thread_local std::string reason;
  reason = hvd::gpu::unavailable_reason();
  return reason.c_str();
}
