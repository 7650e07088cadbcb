// The gloo controller's collective algorithms over the authenticated TCP
// links (tcp_exchange.h), and the one rule that picks them.
//
// choose_algorithm() is the rule: it depends only on the collective, the
// byte count and the number of ranks, never on the build, the host or
// timing, so ranks running different variants of one release pick the same
// algorithm and get bitwise identical results. Every algorithm reduces in an
// order fixed by the algorithm itself (docs/reference/transport.md,
// "Algorithms"): where two ranks combine the same two partial results, the
// lower ranks' part is always the first operand.
//
// algorithm_peers() is the set of ranks a rank ever talks to under this
// rule (ring neighbours, the r +- 2^k partners of Bruck, dissemination and
// binomial trees, the hypercube partners of recursive doubling/halving):
// the connections init() opens. It is symmetric (q is a peer of r iff r is
// a peer of q). Alltoall needs every pair and opens the rest on first use.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "hvd/hvd.h"
#include "tcp_exchange.h"

namespace hvd {
namespace tcp {

enum class Collective { Allreduce, Allgather, Broadcast, Barrier };

enum class Algorithm {
  RecursiveDoubling,  // allreduce, log2 p rounds of the whole buffer
  Rabenseifner,       // allreduce: recursive halving reduce-scatter + recursive doubling allgather
  Ring,               // allreduce (reduce-scatter + allgather) or allgather, p-1 steps each
  Bruck,              // allgather, ceil(log2 p) rounds
  BinomialTree,       // broadcast, ceil(log2 p) rounds
  ScatterAllgather,   // broadcast: binomial scatter of p shares, then the allgather the rule picks
  Dissemination,      // barrier, ceil(log2 p) rounds of empty messages
};

// The crossovers (bytes: the whole buffer for allreduce and broadcast, the
// gathered output for allgather). Below kAllreduceLargeBytes allreduce
// doubles; at and above it, halving-doubling on a power of two rank count,
// and on other counts halving-doubling up to kAllreduceRingBytes, then the
// ring (whose bandwidth term 2(p-1)/p does not pay the extra fold of a
// non-power-of-two count).
constexpr size_t kAllreduceLargeBytes = size_t{64} << 10;
constexpr size_t kAllreduceRingBytes = size_t{4} << 20;
constexpr size_t kAllgatherRingBytes = size_t{16} << 20;
constexpr size_t kBroadcastScatterBytes = size_t{256} << 10;

Algorithm choose_algorithm(Collective collective, size_t bytes, int ranks);
const char* algorithm_name(Algorithm algorithm);

// The ranks `rank` exchanges data with under choose_algorithm, ascending.
std::vector<int> algorithm_peers(int rank, int size);

// The collectives over `links` (rank links.rank() of links.size()).
class Algorithms {
 public:
  Algorithms(Exchange& links, double timeout_s) : x_(links), timeout_s_(timeout_s) {}

  // In place in buf (in: nullptr or a separate input of the same size).
  void allreduce(const void* in, void* buf, size_t count, hvd_dtype dtype, hvd_op op);
  // bytes[r] from rank r, concatenated in rank order into out.
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes, const char* what);
  void broadcast(void* buf, size_t bytes, int root);
  void barrier();
  // The agreement round: every rank's block (this rank's: `bytes` at `mine`,
  // every rank's at most `cap`; lengths may differ between ranks) in one Bruck
  // allgather, ceil(log2 p) rounds. blocks[r]/sizes[r]: rank r's, pointing
  // into a buffer of this object, valid until the next call.
  void gather_blocks(const void* mine, size_t bytes, size_t cap, std::vector<const unsigned char*>& blocks,
                     std::vector<size_t>& sizes);

 private:
  void exchange(int to, const void* send, size_t send_bytes, int from, void* recv, size_t recv_bytes,
                const char* what);
  void fold_in(unsigned char* buf, size_t count, hvd_dtype dtype, hvd_op op);
  void fold_out(unsigned char* buf, size_t bytes);
  void recursive_doubling(unsigned char* buf, size_t count, hvd_dtype dtype, hvd_op op);
  void rabenseifner(unsigned char* buf, size_t count, hvd_dtype dtype, hvd_op op);
  void ring_allreduce(unsigned char* buf, size_t count, hvd_dtype dtype, hvd_op op);
  // Rotation `shift`: virtual rank v is real rank (v + shift) % p; block v of out belongs to v.
  void bruck(const void* in, void* out, const std::vector<size_t>& bytes, int shift, const char* what);
  void ring_allgather(void* out, const std::vector<size_t>& bytes, int shift, const char* what);
  void binomial_broadcast(void* buf, size_t bytes, int root);
  void scatter_allgather(void* buf, size_t bytes, int root);

  Exchange& x_;
  double timeout_s_;
  std::vector<unsigned char> tmp_;
  // gather_blocks' packed blocks in Bruck's rotated order: room for p full
  // blocks, left uninitialised so that only the pages blocks reach are touched.
  std::unique_ptr<unsigned char[]> blocks_;
  size_t blocks_room_ = 0;
  std::vector<size_t> block_at_;  // where rotated block j starts in blocks_
};

}  // namespace tcp
}  // namespace hvd
