// The transport a build carries collective data over (the gloo controller's
// TCP mesh or MPI). The ops layer (ops.cpp) validates tensors, checks ranks
// agree, applies scaling and fusion, then calls these byte-level primitives.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace hvd {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string name() const = 0;
  virtual std::string version() const = 0;

  // Every rank contributes `bytes`; out holds size() * bytes in rank order.
  virtual void allgather(const void* in, void* out, size_t bytes) = 0;
  // Reduce `count` elements of `in` (nullptr: in place) into `buf`.
  virtual void allreduce(const void* in, void* buf, size_t count, hvd_dtype dtype, hvd_op op) = 0;
  // Rank r contributes bytes[r]; out is the concatenation.
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // send_bytes[r] go to rank r (contiguous, in rank order); recv likewise.
  virtual void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                         const std::vector<size_t>& recv_bytes) = 0;
  virtual void barrier() = 0;

  // How data travels ("gloo tcp", "mpi", "shm", "hierarchical: ..."), overall
  // and between two ranks, for build_info and job explanations.
  virtual std::string transport() const { return name() == "gloo" ? "gloo tcp" : name(); }
  virtual std::string pair_transport(int a, int b) const { return a == b ? "self" : transport(); }

  // Whether the agreement round may size its slots to each call (shared
  // memory: ranks that disagree still read each other's descriptors) and
  // how many payload bytes may then ride in it (one exchange instead of
  // two). The network has neither: its compact agreement round has one size
  // whatever each rank called (state.h, agree()).
  virtual size_t inline_limit() const { return 0; }
  virtual bool sized_slots() const { return false; }

  // The network's agreement round with payloads (the gloo mesh): blocks of
  // at most block_limit() bytes whose lengths may differ between ranks (each
  // rank sizes its own to its call, so ranks that disagree still take part),
  // every rank's in rank order in one allgather: blocks[r]/sizes[r], valid
  // until the next call. block_limit() 0: the transport has none (MPI).
  virtual size_t block_limit() const { return 0; }
  virtual void gather_blocks(const void* mine, size_t bytes, std::vector<const unsigned char*>& blocks,
                             std::vector<size_t>& sizes);

  // A communicator of the global `ranks` (called by those members only):
  // process set `id`, connected through `store` where the transport needs it
  // (the default: HVD_ERR_UNAVAILABLE naming the transport).
  virtual std::unique_ptr<Backend> subset(int id, const std::vector<int>& ranks, const hvd_store* store,
                                          const std::string& hostname, double timeout_s);

  // A communicator of `members` (ranks here, ascending) made over this
  // one's own connections, without the store: called by every rank, it
  // answers nullptr on a non-member, and everywhere when the transport
  // cannot (the default; the hierarchy then falls back to the whole job).
  virtual std::unique_ptr<Backend> split(const std::vector<int>& members) {
    (void)members;
    return nullptr;
  }
};

std::unique_ptr<Backend> make_gloo_backend(int rank, int size, int local_rank, int local_size,
                                           const hvd_store& store, const std::string& hostname,
                                           double timeout_s);
std::unique_ptr<Backend> make_mpi_backend(double timeout_s);

// This rank's shared-memory settings (HVD_SELECTOR_SHM, HVD_SELECTOR_SHM_SLOT),
// read once per init; a malformed value is kept in `error`, not thrown, so
// init() can tell every rank which rank's setting is wrong (context.cpp).
struct ShmSettings {
  bool enabled = true;
  size_t slot_bytes = size_t{1} << 20;
  int direct = 3;  // HVD_SELECTOR_SHM_DIRECT: 0 slots only, 1 the rule, 2 (`all`) always, 3 (`auto`) measured
  std::string error;
};
ShmSettings shm_settings();

// Wraps a network backend with the intra-host shared-memory transport
// (shm_backend.cpp); returns `inner` itself when shared memory is off or size 1.
// Every rank must pass the same settings (init() checks that first).
std::unique_ptr<Backend> with_shared_memory(std::unique_ptr<Backend> inner, const ShmSettings& settings,
                                            double timeout_s);

// Version of the MPI library compiled in, for hvd_library_versions().
std::string mpi_version();

}  // namespace hvd
