// Lazy CUDA/NCCL: libhvd_nccl.so is dlopen()ed from the directory of the
// loaded core on the first GPU operation (nccl builds only), so a GPU variant
// imports and serves CPU tensors on a machine without a GPU.
#pragma once

#include <string>

#include "backend.h"
#include "hvd/nccl_plugin.h"

namespace hvd::gpu {

// The plugin with its communicator initialised (rank 0's unique id is
// broadcast over `cpu`); throws HVD_ERR_UNAVAILABLE with the reason.
const hvd_nccl_plugin& plugin(Backend& cpu);

// Why GPU tensors cannot be served, or "" when they can (loads the plugin).
std::string unavailable_reason();

// Plugin status code -> Error with the plugin's last_error().
void check(const hvd_nccl_plugin& p, int rc, const char* what);

void shutdown();

}  // namespace hvd::gpu
