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
#include "kernels_cpu.h"
#include "tcp_exchange.h"
#include "tcp_mesh.h"

namespace hvd {
namespace {

// Below this a broadcast goes from the root to every rank at once; from here
// on (and with more than 2 ranks) the root scatters one share per rank and
// the ranks allgather them, so the root sends the buffer once, not size-1 times.
constexpr size_t kScatterBroadcastBytes = 64 << 10;

std::vector<size_t> offsets(const std::vector<size_t>& bytes) {
  std::vector<size_t> off(bytes.size() + 1, 0);
  for (size_t i = 0; i < bytes.size(); ++i) off[i + 1] = off[i] + bytes[i];
  return off;
}

void copy_own(const void* from, void* to, size_t bytes) {
  if (bytes && from != to) std::memmove(to, from, bytes);
}

class TcpBackend : public Backend {
 public:
  TcpBackend(int rank, int size, int local_rank, int local_size, const hvd_store& store,
             const std::string& hostname, double timeout_s)
      : rank_(rank), size_(size), local_rank_(local_rank), local_size_(local_size), timeout_s_(timeout_s) {
    tcp::MeshOptions mesh;
    mesh.rank = rank;
    mesh.size = size;
    mesh.hostname = hostname;
    mesh.timeout_s = timeout_s;
    links_ = std::make_unique<tcp::Exchange>(tcp::connect_mesh(mesh, store), rank);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "gloo"; }
  std::string version() const override { return ""; }

  void allgather(const void* in, void* out, size_t bytes) override {
    allgatherv(in, out, std::vector<size_t>(size_, bytes), "allgather");
  }

  // Reduce-scatter with one alltoallv (rank r receives everybody's share r),
  // a local reduction in rank order with the target-compiled kernels, then an
  // allgatherv of the reduced shares: two exchanges whatever the size, each
  // rank sending and receiving 2(p-1)/p of the buffer, like a ring.
  void allreduce(const void* in, void* buf, size_t count, hvd_dtype dtype, hvd_op op) override {
    if (count == 0) return;
    const size_t esize = dtype_size(dtype);
    const size_t p = static_cast<size_t>(size_);
    std::vector<size_t> begin(p + 1);
    for (size_t i = 0; i <= p; ++i) begin[i] = count * i / p;
    const size_t mine = begin[rank_ + 1] - begin[rank_];
    std::vector<size_t> send(p), recv(p, mine * esize), shares(p);
    for (size_t i = 0; i < p; ++i) shares[i] = send[i] = (begin[i + 1] - begin[i]) * esize;
    if (scratch_.size() < p * mine * esize) scratch_.resize(p * mine * esize);
    unsigned char* s = scratch_.data();
    alltoallv(in ? in : buf, send, s, recv, "allreduce");
    for (size_t r = 1; r < p; ++r) kernels::reduce(dtype, op, s, s, s + r * mine * esize, mine);
    allgatherv(s, buf, shares, "allreduce");
  }

  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    allgatherv(in, out, bytes, "allgather");
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    if (bytes == 0 || size_ == 1) return;
    if (size_ == 2 || bytes < kScatterBroadcastBytes) {
      std::vector<tcp::Transfer> t;
      if (rank_ == root) {
        for (int q = 0; q < size_; ++q)
          if (q != rank_) t.push_back({q, true, buf, bytes});
      } else {
        t.push_back({root, false, nullptr, 0, true, buf, bytes});
      }
      links_->run(t, timeout_s_, "broadcast");
      return;
    }
    std::vector<size_t> shares(size_);
    for (int i = 0; i < size_; ++i) shares[i] = bytes * (i + 1) / size_ - bytes * i / size_;
    auto off = offsets(shares);
    auto* base = static_cast<unsigned char*>(buf);
    std::vector<tcp::Transfer> t;
    if (rank_ == root) {
      for (int q = 0; q < size_; ++q)
        if (q != rank_) t.push_back({q, true, base + off[q], shares[q]});
    } else {
      t.push_back({root, false, nullptr, 0, true, base + off[rank_], shares[rank_]});
    }
    links_->run(t, timeout_s_, "broadcast");
    allgatherv(base + off[rank_], buf, shares, "broadcast");
  }

  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    alltoallv(in, send_bytes, out, recv_bytes, "alltoall");
  }

  void barrier() override {
    std::vector<tcp::Transfer> t;
    for (int q = 0; q < size_; ++q)
      if (q != rank_) t.push_back({q, true, nullptr, 0, true, nullptr, 0});
    links_->run(t, timeout_s_, "barrier");
  }

  // A fresh authenticated mesh of the members, rendezvoused through `store`
  // (the caller gives it a key prefix of its own; a fresh nonce with it).
  std::unique_ptr<Backend> subset(int, const std::vector<int>& ranks, const hvd_store* store,
                                  const std::string& hostname, double timeout_s) override {
    if (!store) throw Error(HVD_ERR_INVALID, "add_process_set: the gloo build needs the rendezvous store");
    int mine = -1;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == rank_) mine = static_cast<int>(i);
    if (mine < 0) throw Error(HVD_ERR_INVALID, "add_process_set: this rank is not a member");
    int n = static_cast<int>(ranks.size());
    return std::make_unique<TcpBackend>(mine, n, mine, n, *store, hostname, timeout_s);
  }

 private:
  // Every rank sends its block to every other rank at once (bytes[r] from rank r).
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes, const char* what) {
    auto off = offsets(bytes);
    auto* base = static_cast<unsigned char*>(out);
    copy_own(in, base + off[rank_], bytes[rank_]);
    std::vector<tcp::Transfer> t;
    for (int q = 0; q < size_; ++q)
      if (q != rank_) t.push_back({q, true, base + off[rank_], bytes[rank_], true, base + off[q], bytes[q]});
    links_->run(t, timeout_s_, what);
  }

  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes, const char* what) {
    auto soff = offsets(send_bytes), roff = offsets(recv_bytes);
    const auto* src = static_cast<const unsigned char*>(in);
    auto* dst = static_cast<unsigned char*>(out);
    if (send_bytes[rank_] != recv_bytes[rank_])
      throw Error(HVD_ERR_INVALID, std::string(what) + ": this rank sends itself " +
                                       std::to_string(send_bytes[rank_]) + " bytes but expects " +
                                       std::to_string(recv_bytes[rank_]));
    copy_own(src + soff[rank_], dst + roff[rank_], send_bytes[rank_]);
    std::vector<tcp::Transfer> t;
    for (int q = 0; q < size_; ++q)
      if (q != rank_)
        t.push_back({q, true, src + soff[q], send_bytes[q], true, dst + roff[q], recv_bytes[q]});
    links_->run(t, timeout_s_, what);
  }

  int rank_, size_, local_rank_, local_size_;
  double timeout_s_;
  std::unique_ptr<tcp::Exchange> links_;
  std::vector<unsigned char> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(int rank, int size, int local_rank, int local_size,
                                           const hvd_store& store, const std::string& hostname,
                                           double timeout_s) {
  return std::make_unique<TcpBackend>(rank, size, local_rank, local_size, store, hostname, timeout_s);
}

}  // namespace hvd
