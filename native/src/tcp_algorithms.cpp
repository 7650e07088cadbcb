// The gloo controller's collective algorithms and the rule that picks them
// (see tcp_algorithms.h; the table is in docs/reference/transport.md).
#include "tcp_algorithms.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "common.h"
#include "kernels_cpu.h"

namespace hvd {
namespace tcp {
namespace {

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }
int lowest_bit(int v) { return v & -v; }

int ceil_power_of_two(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// A rank count p folds into its largest power of two `pof2`: of the first
// 2 * rem ranks (rem = p - pof2) each even rank hands its data to the odd
// rank after it and sits out; the others take part as "virtual" ranks.
struct Fold {
  int pof2 = 1, rem = 0;
  explicit Fold(int p) {
    while (pof2 * 2 <= p) pof2 *= 2;
    rem = p - pof2;
  }
  int virtual_rank(int r) const {
    if (r < 2 * rem) return r % 2 ? r / 2 : -1;
    return r - rem;
  }
  int real_rank(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
};

size_t total(const std::vector<size_t>& bytes) {
  size_t n = 0;
  for (size_t b : bytes) n += b;
  return n;
}

std::vector<size_t> prefix(const std::vector<size_t>& bytes) {
  std::vector<size_t> off(bytes.size() + 1, 0);
  for (size_t i = 0; i < bytes.size(); ++i) off[i + 1] = off[i] + bytes[i];
  return off;
}

}  // namespace

Algorithm choose_algorithm(Collective collective, size_t bytes, int ranks) {
  switch (collective) {
    case Collective::Allreduce:
      if (bytes < kAllreduceLargeBytes) return Algorithm::RecursiveDoubling;
      if (power_of_two(ranks) || bytes < kAllreduceRingBytes) return Algorithm::Rabenseifner;
      return Algorithm::Ring;
    case Collective::Allgather: return bytes < kAllgatherRingBytes ? Algorithm::Bruck : Algorithm::Ring;
    case Collective::Broadcast:
      return bytes < kBroadcastScatterBytes || ranks <= 2 ? Algorithm::BinomialTree
                                                          : Algorithm::ScatterAllgather;
    case Collective::Barrier: break;
  }
  return Algorithm::Dissemination;
}

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::RecursiveDoubling: return "recursive doubling";
    case Algorithm::Rabenseifner: return "recursive halving + doubling";
    case Algorithm::Ring: return "ring";
    case Algorithm::Bruck: return "bruck";
    case Algorithm::BinomialTree: return "binomial tree";
    case Algorithm::ScatterAllgather: return "scatter + allgather";
    case Algorithm::Dissemination: return "dissemination";
  }
  return "?";
}

std::vector<int> algorithm_peers(int rank, int size) {
  std::set<int> peers;
  for (int d = 1; d < size; d *= 2) {  // ring, bruck, dissemination, binomial trees: r +- 2^k
    peers.insert((rank + d) % size);
    peers.insert((rank - d % size + size) % size);
  }
  Fold fold(size);  // recursive doubling and halving: the fold partner, then hypercube partners
  if (rank < 2 * fold.rem) peers.insert(rank ^ 1);
  int v = fold.virtual_rank(rank);
  if (v >= 0)
    for (int mask = 1; mask < fold.pof2; mask *= 2) peers.insert(fold.real_rank(v ^ mask));
  peers.erase(rank);
  return {peers.begin(), peers.end()};
}

// ---------------------------------------------------------------- primitives
void Algorithms::exchange(int to, const void* send, size_t send_bytes, int from, void* recv,
                          size_t recv_bytes, const char* what) {
  std::vector<Transfer> t;
  if (to >= 0 && to == from) {
    t.push_back({to, true, send, send_bytes, true, recv, recv_bytes});
  } else {
    if (to >= 0) t.push_back({to, true, send, send_bytes});
    if (from >= 0) t.push_back({from, false, nullptr, 0, true, recv, recv_bytes});
  }
  x_.run(t, timeout_s_, what);
}

// ---------------------------------------------------------------- allreduce
void Algorithms::allreduce(const void* in, void* buf, size_t count, hvd_dtype dtype, hvd_op op) {
  const size_t esize = dtype_size(dtype);
  if (in && in != buf) std::memmove(buf, in, count * esize);
  if (count == 0 || x_.size() == 1) return;
  auto* b = static_cast<unsigned char*>(buf);
  switch (choose_algorithm(Collective::Allreduce, count * esize, x_.size())) {
    case Algorithm::RecursiveDoubling: return recursive_doubling(b, count, dtype, op);
    case Algorithm::Rabenseifner: return rabenseifner(b, count, dtype, op);
    default: return ring_allreduce(b, count, dtype, op);
  }
}

// Off powers of two: each even rank of the first 2 * rem hands its buffer
// to the odd rank after it (which reduces even ^ odd, in that order) ...
void Algorithms::fold_in(unsigned char* buf, size_t count, hvd_dtype dtype, hvd_op op) {
  const int r = x_.rank();
  const size_t bytes = count * dtype_size(dtype);
  if (r >= 2 * Fold(x_.size()).rem) return;
  if (r % 2 == 0) return exchange(r + 1, buf, bytes, -1, nullptr, 0, "allreduce");
  if (tmp_.size() < bytes) tmp_.resize(bytes);
  exchange(-1, nullptr, 0, r - 1, tmp_.data(), bytes, "allreduce");
  kernels::reduce(dtype, op, buf, tmp_.data(), buf, count);
}

// ... and gets the result back from it at the end.
void Algorithms::fold_out(unsigned char* buf, size_t bytes) {
  const int r = x_.rank();
  if (r >= 2 * Fold(x_.size()).rem) return;
  if (r % 2)
    exchange(r - 1, buf, bytes, -1, nullptr, 0, "allreduce");
  else
    exchange(-1, nullptr, 0, r + 1, buf, bytes, "allreduce");
}

// Pairs of virtual ranks v, v ^ mask swap their whole buffers and both
// compute lower ^ upper (the lower virtual rank's partial first), so both
// hold the same bits; folded pairs likewise (the even rank's data first).
void Algorithms::recursive_doubling(unsigned char* buf, size_t count, hvd_dtype dtype, hvd_op op) {
  const int r = x_.rank();
  const size_t bytes = count * dtype_size(dtype);
  if (tmp_.size() < bytes) tmp_.resize(bytes);
  unsigned char* tmp = tmp_.data();
  Fold fold(x_.size());
  const int v = fold.virtual_rank(r);
  fold_in(buf, count, dtype, op);
  if (v >= 0) {
    for (int mask = 1; mask < fold.pof2; mask *= 2) {
      const int pv = v ^ mask, peer = fold.real_rank(pv);
      exchange(peer, buf, bytes, peer, tmp, bytes, "allreduce");
      if (pv < v)
        kernels::reduce(dtype, op, buf, tmp, buf, count);
      else
        kernels::reduce(dtype, op, buf, buf, tmp, count);
    }
  }
  fold_out(buf, bytes);
}

// Rabenseifner: the same fold; recursive halving leaves virtual rank v with
// chunk v reduced over all ranks (one rank computes each element), then
// recursive doubling gathers the chunks. Bandwidth 2(p'-1)/p' of the buffer.
void Algorithms::rabenseifner(unsigned char* buf, size_t count, hvd_dtype dtype, hvd_op op) {
  const int r = x_.rank();
  const size_t esize = dtype_size(dtype), bytes = count * esize;
  if (tmp_.size() < bytes) tmp_.resize(bytes);
  unsigned char* tmp = tmp_.data();
  Fold fold(x_.size());
  const int v = fold.virtual_rank(r), n = fold.pof2;
  fold_in(buf, count, dtype, op);
  if (v >= 0) {
    std::vector<size_t> at(n + 1);  // chunk c is elements [at[c], at[c + 1])
    for (int c = 0; c <= n; ++c) at[c] = count * static_cast<size_t>(c) / static_cast<size_t>(n);
    int lo = 0, hi = n;
    for (int mask = n / 2; mask >= 1; mask /= 2) {
      const int pv = v ^ mask, peer = fold.real_rank(pv), mid = lo + (hi - lo) / 2;
      const bool lower = (v & mask) == 0;
      const int keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
      const int send_lo = lower ? mid : lo, send_hi = lower ? hi : mid;
      const size_t keep = at[keep_hi] - at[keep_lo];
      exchange(peer, buf + at[send_lo] * esize, (at[send_hi] - at[send_lo]) * esize, peer, tmp, keep * esize,
               "allreduce");
      unsigned char* mine = buf + at[keep_lo] * esize;
      if (pv < v)
        kernels::reduce(dtype, op, mine, tmp, mine, keep);
      else
        kernels::reduce(dtype, op, mine, mine, tmp, keep);
      lo = keep_lo;
      hi = keep_hi;
    }
    for (int mask = 1; mask < n; mask *= 2) {
      const int pv = v ^ mask, peer = fold.real_rank(pv);
      const int mine = v & ~(mask - 1), theirs = pv & ~(mask - 1);
      exchange(peer, buf + at[mine] * esize, (at[mine + mask] - at[mine]) * esize, peer,
               buf + at[theirs] * esize, (at[theirs + mask] - at[theirs]) * esize, "allreduce");
    }
  }
  fold_out(buf, bytes);
}

// Ring: chunk c travels c, c+1, ..., c-1 (mod p), each rank adding its own
// part after the incoming partial sum; rank r ends with chunk r+1 reduced
// and the allgather ring passes the chunks on.
void Algorithms::ring_allreduce(unsigned char* buf, size_t count, hvd_dtype dtype, hvd_op op) {
  const int p = x_.size(), r = x_.rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  const size_t esize = dtype_size(dtype);
  std::vector<size_t> at(p + 1);
  for (int c = 0; c <= p; ++c) at[c] = count * static_cast<size_t>(c) / static_cast<size_t>(p);
  auto chunk = [&](int c) { return buf + at[c] * esize; };
  auto elems = [&](int c) { return at[c + 1] - at[c]; };
  if (tmp_.size() < (count / p + 1) * esize) tmp_.resize((count / p + 1) * esize);
  for (int s = 0; s < p - 1; ++s) {
    const int out = ((r - s) % p + p) % p, in = ((r - s - 1) % p + p) % p;
    exchange(next, chunk(out), elems(out) * esize, prev, tmp_.data(), elems(in) * esize, "allreduce");
    kernels::reduce(dtype, op, chunk(in), tmp_.data(), chunk(in), elems(in));
  }
  for (int s = 0; s < p - 1; ++s) {
    const int out = ((r + 1 - s) % p + p) % p, in = ((r - s) % p + p) % p;
    exchange(next, chunk(out), elems(out) * esize, prev, chunk(in), elems(in) * esize, "allreduce");
  }
}

// ---------------------------------------------------------------- allgather
void Algorithms::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes, const char* what) {
  const int r = x_.rank();
  if (x_.size() == 1 || choose_algorithm(Collective::Allgather, total(bytes), x_.size()) == Algorithm::Bruck)
    return bruck(in, out, bytes, 0, what);
  auto* base = static_cast<unsigned char*>(out);
  const size_t at = prefix(bytes)[r];
  if (bytes[r] && in != base + at) std::memmove(base + at, in, bytes[r]);
  ring_allgather(out, bytes, 0, what);
}

// Bruck: in round d (1, 2, 4, ...) a rank passes everything it has to the
// rank d before it and gets the next blocks from the rank d after it, in
// a buffer rotated so that its own block comes first; then it unrotates.
void Algorithms::bruck(const void* in, void* out, const std::vector<size_t>& bytes, int shift,
                       const char* what) {
  const int p = x_.size(), v = ((x_.rank() - shift) % p + p) % p;
  auto real = [&](int u) { return ((u % p + p) % p + shift) % p; };
  auto off = prefix(bytes);
  std::vector<size_t> rot(p + 1, 0);  // rotated block j is virtual rank v + j
  for (int j = 0; j < p; ++j) rot[j + 1] = rot[j] + bytes[(v + j) % p];
  if (tmp_.size() < rot[p]) tmp_.resize(rot[p]);
  unsigned char* tmp = tmp_.data();
  if (bytes[v]) std::memcpy(tmp, in, bytes[v]);
  for (int d = 1; d < p; d *= 2) {
    const int cnt = std::min(d, p - d);
    exchange(real(v - d), tmp, rot[cnt], real(v + d), tmp + rot[d], rot[d + cnt] - rot[d], what);
  }
  auto* base = static_cast<unsigned char*>(out);
  for (int j = 0; j < p; ++j) {
    const int u = (v + j) % p;
    if (bytes[u] && base + off[u] != tmp + rot[j] && !(j == 0 && in == base + off[u]))
      std::memcpy(base + off[u], tmp + rot[j], bytes[u]);
  }
}

// Ring: p-1 steps, each passing on the block received in the step before.
void Algorithms::ring_allgather(void* out, const std::vector<size_t>& bytes, int shift, const char* what) {
  const int p = x_.size(), v = ((x_.rank() - shift) % p + p) % p;
  auto* base = static_cast<unsigned char*>(out);
  auto off = prefix(bytes);
  const int next = (x_.rank() + 1) % p, prev = (x_.rank() + p - 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const int give = ((v - s) % p + p) % p, take = ((v - s - 1) % p + p) % p;
    exchange(next, base + off[give], bytes[give], prev, base + off[take], bytes[take], what);
  }
}

// ---------------------------------------------------------------- broadcast
void Algorithms::broadcast(void* buf, size_t bytes, int root) {
  if (bytes == 0 || x_.size() == 1) return;
  if (choose_algorithm(Collective::Broadcast, bytes, x_.size()) == Algorithm::BinomialTree)
    return binomial_broadcast(buf, bytes, root);
  scatter_allgather(buf, bytes, root);
}

// Virtual rank v = rank - root receives from v - lowbit(v) and sends to
// v + 2^k for each 2^k below lowbit(v) (the root: below p).
void Algorithms::binomial_broadcast(void* buf, size_t bytes, int root) {
  const int p = x_.size(), v = (x_.rank() - root + p) % p;
  auto real = [&](int u) { return (u + root) % p; };
  if (v) exchange(-1, nullptr, 0, real(v - lowest_bit(v)), buf, bytes, "broadcast");
  std::vector<Transfer> t;
  for (int mask = (v ? lowest_bit(v) : ceil_power_of_two(p)) / 2; mask >= 1; mask /= 2)
    if (v + mask < p) t.push_back({real(v + mask), true, buf, bytes});
  if (!t.empty()) x_.run(t, timeout_s_, "broadcast");
}

// The root's buffer in p shares (share u for virtual rank u) goes down the
// same binomial tree, each subtree getting only its shares; then the ranks
// allgather the shares (the allgather algorithm the rule picks for `bytes`).
void Algorithms::scatter_allgather(void* buf, size_t bytes, int root) {
  const int p = x_.size(), v = (x_.rank() - root + p) % p;
  auto real = [&](int u) { return (u + root) % p; };
  std::vector<size_t> share(p);
  for (int u = 0; u < p; ++u) share[u] = bytes * (u + 1) / p - bytes * u / p;
  auto off = prefix(share);
  auto* base = static_cast<unsigned char*>(buf);
  const int span = v ? lowest_bit(v) : ceil_power_of_two(p);
  if (v) {
    const int end = std::min(v + span, p);
    exchange(-1, nullptr, 0, real(v - span), base + off[v], off[end] - off[v], "broadcast");
  }
  std::vector<Transfer> t;
  for (int mask = span / 2; mask >= 1; mask /= 2) {
    const int c = v + mask;
    if (c < p) t.push_back({real(c), true, base + off[c], off[std::min(c + mask, p)] - off[c]});
  }
  if (!t.empty()) x_.run(t, timeout_s_, "broadcast");
  if (choose_algorithm(Collective::Allgather, bytes, p) == Algorithm::Bruck)
    bruck(base + off[v], buf, share, root, "broadcast");
  else
    ring_allgather(buf, share, root, "broadcast");
}

// ---------------------------------------------------------------- agreement
namespace {
size_t padded(size_t n) { return (n + 7) & ~size_t{7}; }
}  // namespace

// Bruck over packed blocks (u64 length, content, zeros to a multiple of 8):
// a rank does not know its peers' lengths beforehand, so each message is
// received up to its capacity and its blocks are read from their headers.
// A message that does not hold exactly the blocks Bruck puts there comes
// from another build: this rank fails and shuts its connections down.
void Algorithms::gather_blocks(const void* mine, size_t bytes, size_t cap,
                               std::vector<const unsigned char*>& blocks, std::vector<size_t>& sizes) {
  const int p = x_.size(), v = x_.rank();
  const size_t stride = 8 + padded(cap);
  if (bytes > cap) throw Error(HVD_ERR_INTERNAL, "agreement block larger than its capacity");
  if (blocks_room_ < stride * p) {
    blocks_.reset(new unsigned char[stride * p]);
    blocks_room_ = stride * p;
  }
  block_at_.assign(p + 1, 0);
  unsigned char* buf = blocks_.get();
  const uint64_t own = bytes;
  std::memcpy(buf, &own, 8);
  if (bytes) std::memcpy(buf + 8, mine, bytes);
  std::memset(buf + 8 + bytes, 0, padded(bytes) - bytes);
  block_at_[1] = 8 + padded(bytes);
  for (int d = 1; d < p; d *= 2) {
    const int cnt = std::min(d, p - d), to = (v - d + p) % p, from = (v + d) % p;
    unsigned char* in = buf + block_at_[d];
    std::vector<Transfer> t;
    if (to == from) {
      t.push_back({to, true, buf, block_at_[cnt], true, in, cnt * stride, true});
    } else {
      t.push_back({to, true, buf, block_at_[cnt]});
      t.push_back({from, false, nullptr, 0, true, in, cnt * stride, true});
    }
    x_.run(t, timeout_s_, "agreement");
    const size_t got = t.back().received;
    size_t at = 0;
    bool readable = true;
    for (int k = 0; k < cnt && readable; ++k) {
      uint64_t n = 0;
      if (at + 8 <= got) std::memcpy(&n, in + at, 8);
      readable = at + 8 <= got && n <= cap && at + 8 + padded(n) <= got;
      at += 8 + padded(n);
      block_at_[d + k + 1] = block_at_[d] + at;
    }
    if (!readable || at != got)
      x_.fail(HVD_ERR_MISMATCH,
              "agreement: rank " + std::to_string(from) +
                  " sent a round this build cannot read (another release of hvd_selector?)");
  }
  blocks.resize(p);
  sizes.resize(p);
  for (int j = 0; j < p; ++j) {
    uint64_t n = 0;
    std::memcpy(&n, buf + block_at_[j], 8);
    blocks[(v + j) % p] = buf + block_at_[j] + 8;
    sizes[(v + j) % p] = n;
  }
}

// ---------------------------------------------------------------- barrier
void Algorithms::barrier() {
  const int p = x_.size(), r = x_.rank();
  for (int d = 1; d < p; d *= 2) exchange((r + d) % p, nullptr, 0, (r - d + p) % p, nullptr, 0, "barrier");
}

}  // namespace tcp
}  // namespace hvd
