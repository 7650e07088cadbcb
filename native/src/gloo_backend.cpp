// Gloo transport: TCP pairs between every rank, set up through the
// launcher's authenticated key-value store (an hvd_store), with the core's
// target-compiled kernels as Gloo's reduction function.
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "backend.h"
#include "common.h"
#include "kernels_cpu.h"

namespace hvd {
namespace {

// gloo::rendezvous::Store over an hvd_store (the Python TCP store client).
class CallbackStore : public gloo::rendezvous::Store {
 public:
  CallbackStore(const hvd_store& store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    char error[256] = {0};
    if (store_.set(store_.ctx, key.c_str(), data.data(), data.size(), error) != 0)
      throw Error(HVD_ERR_TIMEOUT, std::string("rendezvous: ") + error);
  }

  std::vector<char> get(const std::string& key) override {
    char error[256] = {0};
    void* value = nullptr;
    size_t len = 0;
    if (store_.get(store_.ctx, key.c_str(), &value, &len, timeout_.count(), error) != 0)
      throw Error(HVD_ERR_TIMEOUT, std::string("rendezvous: ") + error);
    std::vector<char> out(static_cast<char*>(value), static_cast<char*>(value) + len);
    std::free(value);
    return out;
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& key : keys) {
      char error[256] = {0};
      void* value = nullptr;
      size_t len = 0;
      if (store_.get(store_.ctx, key.c_str(), &value, &len, timeout.count(), error) != 0)
        throw Error(HVD_ERR_TIMEOUT, std::string("rendezvous: ") + error);
      std::free(value);
    }
  }

 private:
  hvd_store store_;
  std::chrono::milliseconds timeout_;
};

// Gloo reports I/O problems as IoException; tell a timeout from a dead peer.
[[noreturn]] void rethrow_gloo(const std::exception& exc, const char* what) {
  std::string msg = exc.what();
  auto pos = msg.find("] ");  // drop gloo's "[file:line] " prefix
  if (msg.rfind("[", 0) == 0 && pos != std::string::npos) msg = msg.substr(pos + 2);
  bool timeout = msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
  if (timeout)
    throw Error(HVD_ERR_TIMEOUT, std::string(what) + ": a peer did not respond in time (" + msg +
                                     "); raise HVD_SELECTOR_TIMEOUT if ranks are just slow");
  throw Error(HVD_ERR_PEER,
              std::string(what) + ": lost connection to a peer, which probably died (" + msg + ")");
}

template <typename Fn>
void guarded(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const gloo::IoException& exc) {
    rethrow_gloo(exc, what);
  } catch (const gloo::EnforceNotMet& exc) {
    throw Error(HVD_ERR_INTERNAL, std::string(what) + ": gloo: " + exc.what());
  } catch (const gloo::Exception& exc) {
    rethrow_gloo(exc, what);
  }
}

class GlooBackend : public Backend {
 public:
  GlooBackend(int rank, int size, int local_rank, int local_size, const hvd_store& store,
              const std::string& hostname, double timeout_s)
      : rank_(rank), size_(size), local_rank_(local_rank), local_size_(local_size) {
    timeout_ = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    guarded("gloo init", [&] {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(timeout_);
      CallbackStore cb(store, timeout_);
      context->connectFullMesh(cb, device_);
      context_ = context;
    });
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "gloo"; }
  std::string version() const override { return gloo_version(); }

  void allgather(const void* in, void* out, size_t bytes) override {
    guarded("allgather", [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), bytes);
      opts.setOutput(static_cast<uint8_t*>(out), bytes * size_);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  // Reduce-scatter with one alltoallv (rank r receives everybody's chunk r),
  // a local reduction in rank order with the target-compiled kernels, then an
  // allgatherv of the reduced chunks. Bandwidth-optimal like a ring, two
  // collectives regardless of size, and measurably faster here than this
  // Gloo release's own gloo::allreduce (see docs/reference/native.md).
  void allreduce(const void* in, void* buf, size_t count, hvd_dtype dtype, hvd_op op) override {
    if (count == 0) return;
    const size_t esize = dtype_size(dtype);
    const size_t p = static_cast<size_t>(size_);
    std::vector<size_t> begin(p + 1);
    for (size_t i = 0; i <= p; ++i) begin[i] = count * i / p;
    const size_t mine = begin[rank_ + 1] - begin[rank_];
    std::vector<size_t> send(p), recv(p, mine * esize), chunks(p);
    for (size_t i = 0; i < p; ++i) chunks[i] = send[i] = (begin[i + 1] - begin[i]) * esize;
    if (scratch_.size() < p * mine * esize) scratch_.resize(p * mine * esize);
    unsigned char* s = scratch_.data();
    alltoallv(in ? in : buf, send, s, recv);
    for (size_t r = 1; r < p; ++r) kernels::reduce(dtype, op, s, s, s + r * mine * esize, mine);
    allgatherv(s, buf, chunks);
  }

  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    guarded("allgather", [&] {
      gloo::AllgathervOptions opts(context_);
      opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), bytes[rank_]);
      opts.setOutput(static_cast<uint8_t*>(out), bytes);
      opts.setTimeout(timeout_);
      gloo::allgatherv(opts);
    });
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    if (bytes == 0) return;
    guarded("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(buf), bytes);
      opts.setRoot(root);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    guarded("alltoall", [&] {
      gloo::AlltoallvOptions opts(context_);
      std::vector<int64_t> s(send_bytes.begin(), send_bytes.end());
      std::vector<int64_t> r(recv_bytes.begin(), recv_bytes.end());
      opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), s);
      opts.setOutput(static_cast<uint8_t*>(out), r);
      opts.setTimeout(timeout_);
      gloo::alltoallv(opts);
    });
  }

  // A fresh full mesh of the members, rendezvoused through `store` (the
  // caller gives it a key prefix of its own).
  std::unique_ptr<Backend> subset(int, const std::vector<int>& ranks, const hvd_store* store,
                                  const std::string& hostname, double timeout_s) override {
    if (!store) throw Error(HVD_ERR_INVALID, "add_process_set: the gloo build needs the rendezvous store");
    int mine = -1;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == rank_) mine = static_cast<int>(i);
    if (mine < 0) throw Error(HVD_ERR_INVALID, "add_process_set: this rank is not a member");
    int n = static_cast<int>(ranks.size());
    return std::make_unique<GlooBackend>(mine, n, mine, n, *store, hostname, timeout_s);
  }

  void barrier() override {
    guarded("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  int rank_, size_, local_rank_, local_size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::vector<unsigned char> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(int rank, int size, int local_rank, int local_size,
                                           const hvd_store& store, const std::string& hostname,
                                           double timeout_s) {
  return std::make_unique<GlooBackend>(rank, size, local_rank, local_size, store, hostname, timeout_s);
}

std::string gloo_version() {
  return std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
         std::to_string(GLOO_VERSION_PATCH);
}

}  // namespace hvd
