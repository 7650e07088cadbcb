// Process-wide state of the core (one communicator per process, as in
// Horovod) and the helpers every op uses: status wrapping and the
// cross-rank agreement check.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <vector>

#include "backend.h"
#include "common.h"

namespace hvd {

// The backend of the calling thread's process set (the global one unless
// hvd_use_process_set chose another); throws HVD_ERR_NOT_INITIALIZED.
Backend& backend();
// The global communicator, whatever set the thread uses.
Backend& global_backend();

// fusion.cpp: "" or one line saying HOROVOD_FUSION_THRESHOLD is malformed (read
// once at load, before anything can be thrown; init() reports it on every rank).
const std::string& fusion_threshold_error();

// process_sets.cpp
int current_process_set();
Backend& process_set_backend(int id);
void clear_process_sets();

void set_last_error(const std::string& message);

// A peer failed or timed out (any op, any thread): at shutdown the GPU
// communicator is aborted instead of left with the peers (gpu_loader.cpp).
void note_peer_failure();
// Whether any collective of this process has failed on a peer or timed out,
// ever (never reset: an MPI job cannot finalise with a peer that stopped, so
// the MPI backend aborts at exit instead; mpi_backend.cpp).
bool collective_failed_ever();

// Run fn, turning exceptions into a status + hvd_last_error().
template <typename Fn>
hvd_status wrap(Fn&& fn) {
  try {
    fn();
    return HVD_OK;
  } catch (const Error& exc) {
    set_last_error(exc.what());
    if (exc.status() == HVD_ERR_PEER || exc.status() == HVD_ERR_TIMEOUT) note_peer_failure();
    return exc.status();
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return HVD_ERR_INTERNAL;
  } catch (const std::exception& exc) {
    set_last_error(exc.what());
    return HVD_ERR_INTERNAL;
  }
}

// Held shared by every collective while it runs and exclusively by
// hvd_finalize, so the communicators (CPU and GPU) are never freed under a
// thread still inside a collective: finalize waits for it, at most the job's
// timeout (ops.cpp).
std::shared_mutex& collectives_lock();

// wrap() for a collective entry point: fn runs under collectives_lock().
template <typename Fn>
hvd_status wrap_collective(Fn&& fn) {
  return wrap([&] {
    std::shared_lock<std::shared_mutex> running(collectives_lock());
    fn();
  });
}

enum class Kind : uint32_t { Allreduce = 1, Grouped, Allgather, Broadcast, Alltoall, Barrier };

// What a rank is about to do; exchanged before every collective so ranks
// that disagree fail together with one clear message instead of hanging.
struct Descriptor {
  uint32_t magic = 0x48564431u;
  uint32_t kind = 0;
  int32_t dtype = -1;
  int32_t op = -1;
  int32_t root = -1;
  int32_t ndim = 0;
  int32_t device = 0;
  int32_t reserved = 0;
  int64_t shape[HVD_MAX_DIMS] = {0};
  uint64_t extra = 0;  // kind-specific (grouped: hash of all shapes)
};
// Payloads follow descriptors in the agreement buffer: this keeps them
// aligned for every dtype (slot sizes are multiples of the element size).
static_assert(sizeof(Descriptor) % 8 == 0, "agreement payloads must stay 8-byte aligned");

Descriptor describe(Kind kind, const hvd_tensor* t, int op, int root);

// Allgathers what every rank is about to do and throws HVD_ERR_MISMATCH
// (same text on every rank) when ranks differ; shape[0] may differ when
// vary_first_dim. Over the network a compact round (a 16-byte summary per
// rank: a digest of the descriptor and shape[0]) comes first, and the full
// round of whole descriptors runs only when it found a difference, to name
// it. `payload` (inline_bytes <= carry_limit(backend(), false); nullptr:
// this rank carries nothing) travels along, on shared memory in slots sized
// to the call, on the gloo mesh after the summary; `payloads`/`sizes`
// receive each rank's carried bytes in rank order (pointers into the
// agreement buffers, no copy, valid until the next agreement round). A
// caller checks `sizes` before it uses a payload: they are the same on
// every rank, so every rank takes the same path.
std::vector<Descriptor> agree(const Descriptor& mine, bool vary_first_dim, const void* payload = nullptr,
                              size_t inline_bytes = 0, std::vector<const unsigned char*>* payloads = nullptr,
                              std::vector<size_t>* sizes = nullptr);

// The agreement round's summary per rank on the network.
constexpr size_t kSummaryBytes = 16;

// The payload bytes a rank may carry in b's agreement round: shared memory's
// inline limit; on the gloo mesh 64 KiB gathered in all (every_rank_carries:
// divided among the ranks, as an allreduce's or allgather's payloads are
// gathered everywhere; a broadcast's root alone carries); 0 over MPI.
size_t carry_limit(const Backend& b, bool every_rank_carries);

// ops.cpp: drops the pieces an allgather_prepare gathered (every agreement
// round does: they belong to the allgather right after it, nothing else).
void forget_gathered();

// Agree on `mine`, then allreduce `count` elements in buf (CPU). On shared
// memory, payloads of at most backend().inline_limit() bytes ride in the
// agreement round and are reduced locally in rank order (one exchange
// instead of two, identical on every rank).
void reduce_agreed(const Descriptor& mine, const void* in, void* buf, size_t count, hvd_dtype dtype,
                   hvd_op op);

// Validates a local tensor argument (dtype, dims, device).
void check_tensor(const hvd_tensor* t, const char* what);

}  // namespace hvd
