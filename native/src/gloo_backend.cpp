// The gloo controller's network backend: collectives over the core's own
// authenticated TCP mesh (tcp_mesh.h makes the connections, both ends
// proving the job secret; tcp_exchange.h moves framed bytes over them),
// with the core's target-compiled kernels as the reduction. "gloo" names
// the controller, as in Horovod (rendezvous through a store, no MPI); the
// core links no Gloo library: Gloo's public API pairs whoever reaches its
// listeners first and keeps listening while a job runs, which the data
// plane must not (docs/reference/security.md, "The data plane").
#include <algorithm>
#include <cstring>
#include <memory>

#include "backend.h"
#include "common.h"
#include "tcp_algorithms.h"
#include "tcp_auth.h"
#include "tcp_exchange.h"
#include "tcp_mesh.h"

namespace hvd {
namespace {

// Each rank's listener address in the records ranks allgather over the links
// already up when they open more connections (tcp_mesh.h's Rendezvous).
constexpr size_t kAddressBytes = 96;

// The largest agreement block: a 16-byte summary and a payload of up to
// 64 KiB (state.h, carry_limit()).
constexpr size_t kBlockBytes = 16 + (size_t{64} << 10);

std::vector<size_t> offsets(const std::vector<size_t>& bytes) {
  std::vector<size_t> off(bytes.size() + 1, 0);
  for (size_t i = 0; i < bytes.size(); ++i) off[i + 1] = off[i] + bytes[i];
  return off;
}

void copy_own(const void* from, void* to, size_t bytes) {
  if (bytes && from != to) std::memmove(to, from, bytes);
}

// Whether algorithm_peers already connects every pair of a `size`-rank job.
bool complete(int size) {
  for (int q = 0; q < size; ++q)
    if (static_cast<int>(tcp::algorithm_peers(q, size).size()) != size - 1) return false;
  return true;
}

class TcpBackend : public Backend {
 public:
  // The world: connections to the algorithms' peers, through the store.
  TcpBackend(int rank, int size, int local_rank, int local_size, const hvd_store& store,
             const std::string& hostname, double timeout_s)
      : TcpBackend(
            rank, size, local_rank, local_size, hostname, timeout_s,
            std::string(static_cast<const char*>(store.key ? store.key : ""), store.key ? store.key_len : 0),
            tcp::connect_mesh(options(rank, size, hostname, timeout_s), tcp::algorithm_peers(rank, size),
                              store)) {}

  TcpBackend(int rank, int size, int local_rank, int local_size, const std::string& hostname,
             double timeout_s, std::string key, std::vector<int> fds)
      : rank_(rank),
        size_(size),
        local_rank_(local_rank),
        local_size_(local_size),
        timeout_s_(timeout_s),
        hostname_(hostname),
        key_(std::move(key)),
        links_(std::make_unique<tcp::Exchange>(std::move(fds), rank)),
        algorithms_(*links_, timeout_s),
        complete_(complete(size)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "gloo"; }
  std::string version() const override { return ""; }

  void allgather(const void* in, void* out, size_t bytes) override {
    algorithms_.allgatherv(in, out, std::vector<size_t>(size_, bytes), "allgather");
  }

  void allreduce(const void* in, void* buf, size_t count, hvd_dtype dtype, hvd_op op) override {
    algorithms_.allreduce(in, buf, count, dtype, op);
  }

  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    algorithms_.allgatherv(in, out, bytes, "allgather");
  }

  void broadcast(void* buf, size_t bytes, int root) override { algorithms_.broadcast(buf, bytes, root); }

  // Every pair at once over direct connections: the first alltoall opens
  // those the other collectives never needed.
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    auto soff = offsets(send_bytes), roff = offsets(recv_bytes);
    const auto* src = static_cast<const unsigned char*>(in);
    auto* dst = static_cast<unsigned char*>(out);
    if (send_bytes[rank_] != recv_bytes[rank_])
      throw Error(HVD_ERR_INVALID, "alltoall: this rank sends itself " + std::to_string(send_bytes[rank_]) +
                                       " bytes but expects " + std::to_string(recv_bytes[rank_]));
    connect_all();
    copy_own(src + soff[rank_], dst + roff[rank_], send_bytes[rank_]);
    std::vector<tcp::Transfer> t;
    for (int q = 0; q < size_; ++q)
      if (q != rank_)
        t.push_back({q, true, src + soff[q], send_bytes[q], true, dst + roff[q], recv_bytes[q]});
    links_->run(t, timeout_s_, "alltoall");
  }

  void barrier() override { algorithms_.barrier(); }

  size_t block_limit() const override { return kBlockBytes; }
  void gather_blocks(const void* mine, size_t bytes, std::vector<const unsigned char*>& blocks,
                     std::vector<size_t>& sizes) override {
    algorithms_.gather_blocks(mine, bytes, kBlockBytes, blocks, sizes);
  }

  // A fresh authenticated mesh of the members, rendezvoused through `store`
  // (the caller gives it a key prefix of its own; a fresh nonce with it).
  std::unique_ptr<Backend> subset(int, const std::vector<int>& ranks, const hvd_store* store,
                                  const std::string& hostname, double timeout_s) override {
    if (!store) throw Error(HVD_ERR_INVALID, "add_process_set: the gloo build needs the rendezvous store");
    int mine = index_of(ranks);
    if (mine < 0) throw Error(HVD_ERR_INVALID, "add_process_set: this rank is not a member");
    int n = static_cast<int>(ranks.size());
    return std::make_unique<TcpBackend>(mine, n, mine, n, *store, hostname, timeout_s);
  }

  // The members' own connections (their algorithms' peers among them), met
  // through this communicator's links: every rank takes part.
  std::unique_ptr<Backend> split(const std::vector<int>& members) override {
    const int mine = index_of(members), n = static_cast<int>(members.size());
    std::vector<int> peers = mine >= 0 ? tcp::algorithm_peers(mine, n) : std::vector<int>();
    auto fds = meet(mine, n, peers, [&](int i) { return members[i]; });
    if (mine < 0) return nullptr;
    return std::make_unique<TcpBackend>(mine, n, mine, n, hostname_, timeout_s_, key_, std::move(fds));
  }

 private:
  static tcp::MeshOptions options(int rank, int size, const std::string& hostname, double timeout_s) {
    tcp::MeshOptions mesh;
    mesh.rank = rank;
    mesh.size = size;
    mesh.hostname = hostname;
    mesh.timeout_s = timeout_s;
    return mesh;
  }

  int index_of(const std::vector<int>& ranks) const {
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == rank_) return static_cast<int>(i);
    return -1;
  }

  // The connections alltoall needs and the algorithms did not open.
  void connect_all() {
    if (complete_) return;
    std::vector<int> missing;
    for (int q = 0; q < size_; ++q)
      if (q != rank_ && !links_->connected(q)) missing.push_back(q);
    auto fds = meet(rank_, size_, missing, [](int i) { return i; });
    for (int q : missing) links_->adopt(q, fds[q]);
    complete_ = true;
  }

  // Opens connections among n of this communicator's ranks (`mine`: this
  // rank's index among them, -1 when it is not one; `global(i)`: index i's
  // rank here), to `peers`, with rank 0's fresh nonce and the listeners'
  // addresses travelling over the links already up (both authenticated).
  template <typename Global>
  std::vector<int> meet(int mine, int n, const std::vector<int>& peers, Global global) {
    tcp::Rendezvous rv;
    rv.key = key_;
    rv.nonce.assign(tcp::kNonceBytes, '\0');
    if (rank_ == 0) tcp::random_bytes(&rv.nonce[0], rv.nonce.size());
    algorithms_.broadcast(&rv.nonce[0], rv.nonce.size(), 0);
    std::vector<char> records(kAddressBytes * size_, 0);
    rv.publish = [&](const std::string& address) {
      char record[kAddressBytes] = {0};
      std::strncpy(record, address.c_str(), kAddressBytes - 1);
      algorithms_.allgatherv(record, records.data(), std::vector<size_t>(size_, kAddressBytes), "init");
    };
    rv.address_of = [&](int i) {
      const char* r = records.data() + kAddressBytes * global(i);
      return std::string(r, strnlen(r, kAddressBytes));
    };
    if (mine < 0) {
      rv.publish("");
      return {};
    }
    return tcp::connect_peers(options(mine, n, hostname_, timeout_s_), peers, rv);
  }

  int rank_, size_, local_rank_, local_size_;
  double timeout_s_;
  std::string hostname_, key_;
  std::unique_ptr<tcp::Exchange> links_;
  tcp::Algorithms algorithms_;
  bool complete_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(int rank, int size, int local_rank, int local_size,
                                           const hvd_store& store, const std::string& hostname,
                                           double timeout_s) {
  return std::make_unique<TcpBackend>(rank, size, local_rank, local_size, store, hostname, timeout_s);
}

}  // namespace hvd
