// The core's side of the GPU: libhvd_nccl.so is dlopen()ed from the directory
// of the loaded core on the first GPU operation (nccl builds only), so a GPU
// variant imports and serves CPU tensors on a machine without a GPU. This
// module is the only code that talks to the plugin: loading it, the NCCL
// communicator's life (made inside the first GPU collective every rank agreed
// on, aborted once a peer failed), each call and its error translation.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "backend.h"
#include "hvd/nccl_plugin.h"

namespace hvd::gpu {

// Why GPU tensors cannot be served, or "" when they can (loads the plugin).
std::string unavailable_reason();

// Local checks before a GPU collective's agreement round: the plugin loads
// (else HVD_ERR_UNAVAILABLE with the reason), the calling thread uses the
// global communicator, and every tensor is on this rank's device.
void check(Backend& cpu, const char* what, std::initializer_list<const hvd_tensor*> tensors);

// Compute capability (major*10+minor) of `device`; -1: this rank's device,
// local_rank % device count. No collective: the communicator is not made.
int compute_capability(const Backend& cpu, int device);

// Runs one plugin collective on the global communicator and waits for it:
// `call` gets the plugin and returns its status. The first call makes the
// communicator, itself a collective over `cpu`, so every rank must reach it
// in the same agreed operation. A failure becomes an Error naming `what`;
// after a peer failure or timeout GPU operations stop until shutdown().
void run(Backend& cpu, const char* what, const std::function<int(const hvd_nccl_plugin&)>& call);

// The job's timeout (from init): how long the plugin waits for its peers.
void configure(double timeout_s);

// Frees the communicator: leaves it with the peers, or aborts it when this
// process saw a peer fail or time out (leaving would wait for a dead peer).
void shutdown();

}  // namespace hvd::gpu
