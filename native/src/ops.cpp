// The collectives of the C surface: validate, agree across ranks, scale,
// then hand bytes to the backend (CPU) or the NCCL plugin (GPU tensors).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu.h"
#include "kernels_cpu.h"
#include "state.h"

namespace hvd {
namespace {

void same_layout(const hvd_tensor* in, const hvd_tensor* out, const char* what) {
  if (in->dtype != out->dtype || in->ndim != out->ndim || num_elements(*in) != num_elements(*out) ||
      in->device != out->device)
    throw Error(HVD_ERR_INVALID, std::string(what) + ": output " + shape_string(*out) +
                                     " does not match input " + shape_string(*in));
}

size_t row_bytes(const hvd_tensor& t) {
  size_t n = dtype_size(t.dtype);
  for (int i = 1; i < t.ndim; ++i) n *= static_cast<size_t>(t.shape[i]);
  return n;
}

// The sum of `count` split sizes, each of which must be >= 0 and the sum fit int64_t; `whose(r)` names
// who gave split r. Splits come from the caller and, for the receive side, from every peer: no
// peer-supplied count is trusted before this check.
template <typename Whose>
int64_t checked_split_sum(const int64_t* splits, int count, Whose whose) {
  int64_t sum = 0;
  for (int r = 0; r < count; ++r) {
    if (splits[r] < 0 || splits[r] > std::numeric_limits<int64_t>::max() - sum)
      throw Error(HVD_ERR_INVALID,
                  "alltoall: " + whose(r) + " is " + std::to_string(splits[r]) +
                      (splits[r] < 0 ? "; splits must be non-negative" : "; the splits overflow"));
    sum += splits[r];
  }
  return sum;
}

std::string own_split(int r) { return "the split for rank " + std::to_string(r); }

double post_factor(hvd_op op, double postscale, int size) {
  return op == HVD_AVERAGE ? postscale / static_cast<double>(size) : postscale;
}

// Whether every rank carried what the agreed call says it should have in
// the agreement round. Every rank sees the same sizes, so all of them take
// the same path: false only where a payload was too big for the round, and
// a rank whose carried bytes contradict the agreed call (a peer of another
// release) fails every rank alike.
bool carried_by_all(const std::vector<size_t>& sizes, const std::vector<size_t>& expected, const char* what) {
  bool all = true;
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] != expected[r] && sizes[r] != 0)
      throw Error(HVD_ERR_MISMATCH, std::string(what) + ": rank " + std::to_string(r) + " carried " +
                                        std::to_string(sizes[r]) + " bytes where the agreed call has " +
                                        std::to_string(expected[r]) +
                                        " (another release of hvd_selector on that rank?)");
    all = all && sizes[r] == expected[r];
  }
  return all;
}

// carried_by_all, where the call's rule had every payload ride along.
void require_carried(const std::vector<size_t>& sizes, const std::vector<size_t>& expected,
                     const char* what) {
  if (!carried_by_all(sizes, expected, what))
    throw Error(HVD_ERR_MISMATCH,
                std::string(what) +
                    ": a rank carried no payload in the agreement round (another release of "
                    "hvd_selector on that rank?)");
}

// An allgather's pieces that rode in allgather_prepare's agreement round
// (the gloo mesh, every piece small): hvd_allgather right after it, with
// the same input and first dimensions, copies them out instead of
// exchanging again. Any agreement round drops them (forget_gathered).
struct Gathered {
  bool valid = false;
  const void* data = nullptr;
  const Backend* backend = nullptr;
  std::vector<int64_t> first_dims;
  std::vector<unsigned char> bytes;
};
thread_local Gathered t_gathered;

}  // namespace

std::shared_mutex& collectives_lock() {
  static std::shared_mutex lock;
  return lock;
}

void reduce_agreed(const Descriptor& mine, const void* in, void* buf, size_t count, hvd_dtype dtype,
                   hvd_op op) {
  Backend& b = backend();
  size_t bytes = count * dtype_size(dtype);
  const void* src = in ? in : buf;
  const size_t limit = carry_limit(b, true);
  if (limit == 0 || bytes > limit || b.size() == 1) {
    agree(mine, false);
    if (b.size() == 1) {
      if (src != buf) std::memcpy(buf, src, bytes);
      return;
    }
    b.allreduce(src, buf, count, dtype, op);
    return;
  }
  std::vector<const unsigned char*> from;
  std::vector<size_t> sizes;
  agree(mine, false, src, bytes, &from, &sizes);
  require_carried(sizes, std::vector<size_t>(b.size(), bytes), "allreduce");
  kernels::reduce(dtype, op, buf, from[0], from[1], count);  // size() >= 2 here
  for (int r = 2; r < b.size(); ++r) kernels::reduce(dtype, op, buf, buf, from[r], count);
}

void forget_gathered() { t_gathered.valid = false; }

}  // namespace hvd

using namespace hvd;

extern "C" {

hvd_status hvd_allreduce(const hvd_tensor* in, hvd_tensor* out, hvd_op op, double prescale,
                         double postscale) {
  return wrap_collective([&] {
    check_tensor(in, "allreduce");
    check_tensor(out, "allreduce");
    if (!valid_op(op)) throw Error(HVD_ERR_INVALID, "allreduce: unknown op " + std::to_string(op));
    same_layout(in, out, "allreduce");
    Backend& b = backend();
    Descriptor d = describe(Kind::Allreduce, in, op, -1);
    size_t count = static_cast<size_t>(num_elements(*in));
    if (in->device == HVD_DEVICE_CUDA) {  // out-of-place or in place: the plugin takes both
      gpu::check(b, "allreduce", {in, out});
      agree(d, false);
      gpu::run(b, "allreduce", [&](const hvd_nccl_plugin& p) {
        return p.allreduce(in->data, out->data, count, in->dtype, op, prescale, postscale, nullptr);
      });
      return;
    }
    double post = post_factor(op, postscale, b.size());
    const void* src = in->data;  // reduced straight from the input unless prescaled
    if (prescale != 1.0) {
      kernels::scale(in->dtype, out->data, in->data, count, prescale);
      src = nullptr;
    }
    reduce_agreed(d, src, out->data, count, in->dtype, op);
    if (post != 1.0) kernels::scale(in->dtype, out->data, out->data, count, post);
  });
}

hvd_status hvd_allgather_prepare(const hvd_tensor* in, int64_t* first_dims) {
  return wrap_collective([&] {
    check_tensor(in, "allgather");
    if (in->ndim < 1) throw Error(HVD_ERR_INVALID, "allgather: needs at least one dimension (got a scalar)");
    Backend& b = backend();
    if (in->device == HVD_DEVICE_CUDA) gpu::check(b, "allgather", {in});
    // On the network a small piece rides in the agreement round (shared
    // memory sizes its slots to the call, which first dimensions that
    // differ would not fit).
    const size_t row = row_bytes(*in), piece = static_cast<size_t>(in->shape[0]) * row;
    const bool carry = in->device == HVD_DEVICE_CPU && !b.sized_slots() && piece <= carry_limit(b, true);
    std::vector<const unsigned char*> from;
    std::vector<size_t> sizes;
    auto all = agree(describe(Kind::Allgather, in, -1, -1), true, carry ? in->data : nullptr,
                     carry ? piece : 0, &from, &sizes);
    std::vector<size_t> pieces(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      first_dims[r] = all[r].shape[0];
      pieces[r] = static_cast<size_t>(first_dims[r]) * row;
    }
    if (b.sized_slots() || b.size() == 1 || !carried_by_all(sizes, pieces, "allgather")) return;
    Gathered& g = t_gathered;
    g.bytes.clear();
    for (size_t r = 0; r < all.size(); ++r) g.bytes.insert(g.bytes.end(), from[r], from[r] + pieces[r]);
    g.first_dims.assign(first_dims, first_dims + all.size());
    g.data = in->data;
    g.backend = &b;
    g.valid = true;
  });
}

hvd_status hvd_allgather(const hvd_tensor* in, hvd_tensor* out, const int64_t* first_dims) {
  return wrap_collective([&] {
    check_tensor(in, "allgather");
    check_tensor(out, "allgather");
    Backend& b = backend();
    size_t row = row_bytes(*in);
    std::vector<size_t> bytes(b.size());
    int64_t total = 0;
    for (int r = 0; r < b.size(); ++r) {
      bytes[r] = static_cast<size_t>(first_dims[r]) * row;
      total += first_dims[r];
    }
    if (out->dtype != in->dtype || out->ndim != in->ndim || out->shape[0] != total || row_bytes(*out) != row)
      throw Error(HVD_ERR_INVALID, "allgather: output " + shape_string(*out) + " has the wrong shape");
    Gathered& g = t_gathered;
    const bool gathered = g.valid && g.data == in->data && g.backend == &b &&
                          std::equal(g.first_dims.begin(), g.first_dims.end(), first_dims) &&
                          g.bytes.size() == static_cast<size_t>(total) * row;
    g.valid = false;
    if (gathered) {
      if (!g.bytes.empty()) std::memcpy(out->data, g.bytes.data(), g.bytes.size());
      return;
    }
    if (in->device == HVD_DEVICE_CUDA) {
      gpu::check(b, "allgather", {in, out});
      std::vector<size_t> counts(b.size());
      for (int r = 0; r < b.size(); ++r) counts[r] = bytes[r] / dtype_size(in->dtype);
      gpu::run(b, "allgather", [&](const hvd_nccl_plugin& p) {
        return p.allgatherv(in->data, out->data, counts.data(), in->dtype, nullptr);
      });
      return;
    }
    b.allgatherv(in->data, out->data, bytes);
  });
}

hvd_status hvd_broadcast(hvd_tensor* inout, int root) {
  return wrap_collective([&] {
    check_tensor(inout, "broadcast");
    Backend& b = backend();
    if (root < 0 || root >= b.size())
      throw Error(HVD_ERR_INVALID, "broadcast: root_rank " + std::to_string(root) + " is not in 0.." +
                                       std::to_string(b.size() - 1));
    if (inout->device == HVD_DEVICE_CUDA) gpu::check(b, "broadcast", {inout});
    Descriptor d = describe(Kind::Broadcast, inout, -1, root);
    size_t count = static_cast<size_t>(num_elements(*inout));
    const size_t bytes = count * dtype_size(inout->dtype);
    if (inout->device == HVD_DEVICE_CPU && !b.sized_slots() && b.size() > 1 &&
        bytes <= carry_limit(b, false)) {
      // A small buffer travels with the root's summary: one round in all. (Not
      // on shared memory: every rank's slot would grow to the buffer, and two
      // exchanges through the segment measured no slower than that one.)
      std::vector<const unsigned char*> from;
      std::vector<size_t> sizes;
      agree(d, false, b.rank() == root ? inout->data : nullptr, bytes, &from, &sizes);
      std::vector<size_t> expected(b.size(), 0);
      expected[root] = bytes;
      require_carried(sizes, expected, "broadcast");
      if (b.rank() != root && bytes) std::memcpy(inout->data, from[root], bytes);
      return;
    }
    agree(d, false);
    if (inout->device == HVD_DEVICE_CUDA) {
      gpu::run(b, "broadcast", [&](const hvd_nccl_plugin& p) {
        return p.broadcast(inout->data, count, inout->dtype, root, nullptr);
      });
      return;
    }
    b.broadcast(inout->data, count * dtype_size(inout->dtype), root);
  });
}

hvd_status hvd_alltoall_prepare(const hvd_tensor* in, const int64_t* splits, int64_t* recv_splits) {
  return wrap_collective([&] {
    check_tensor(in, "alltoall");
    if (in->ndim < 1) throw Error(HVD_ERR_INVALID, "alltoall: needs at least one dimension (got a scalar)");
    Backend& b = backend();
    int64_t sum = checked_split_sum(splits, b.size(), own_split);
    if (sum != in->shape[0])
      throw Error(HVD_ERR_INVALID, "alltoall: splits add up to " + std::to_string(sum) +
                                       " but the first dimension is " + std::to_string(in->shape[0]));
    if (in->device == HVD_DEVICE_CUDA) gpu::check(b, "alltoall", {in});
    agree(describe(Kind::Alltoall, in, -1, -1), true);
    std::vector<int64_t> all(static_cast<size_t>(b.size()) * b.size());
    b.allgather(splits, all.data(), sizeof(int64_t) * b.size());
    // Every rank checks every peer's row of the same matrix, so all of them fail together.
    for (int from = 0; from < b.size(); ++from)
      checked_split_sum(&all[static_cast<size_t>(from) * b.size()], b.size(), [from](int to) {
        return "rank " + std::to_string(from) + "'s split for rank " + std::to_string(to);
      });
    for (int r = 0; r < b.size(); ++r) recv_splits[r] = all[static_cast<size_t>(r) * b.size() + b.rank()];
  });
}

hvd_status hvd_alltoall(const hvd_tensor* in, const int64_t* splits, hvd_tensor* out,
                        const int64_t* recv_splits) {
  return wrap_collective([&] {
    check_tensor(in, "alltoall");
    check_tensor(out, "alltoall");
    Backend& b = backend();
    size_t row = row_bytes(*in);
    if (checked_split_sum(splits, b.size(), own_split) != in->shape[0])
      throw Error(HVD_ERR_INVALID,
                  "alltoall: splits do not add up to the first dimension of " + shape_string(*in));
    int64_t total = checked_split_sum(
        recv_splits, b.size(), [](int r) { return "the receive count from rank " + std::to_string(r); });
    std::vector<size_t> sb(b.size()), rb(b.size());
    for (int r = 0; r < b.size(); ++r) {  // both sums match allocated tensors, so no product overflows
      sb[r] = static_cast<size_t>(splits[r]) * row;
      rb[r] = static_cast<size_t>(recv_splits[r]) * row;
    }
    if (out->dtype != in->dtype || out->ndim != in->ndim || out->shape[0] != total || row_bytes(*out) != row)
      throw Error(HVD_ERR_INVALID, "alltoall: output " + shape_string(*out) + " has the wrong shape");
    if (in->device == HVD_DEVICE_CUDA) {
      gpu::check(b, "alltoall", {in, out});
      std::vector<size_t> sc(b.size()), rc(b.size());
      for (int r = 0; r < b.size(); ++r) {
        sc[r] = sb[r] / dtype_size(in->dtype);
        rc[r] = rb[r] / dtype_size(in->dtype);
      }
      gpu::run(b, "alltoall", [&](const hvd_nccl_plugin& p) {
        return p.alltoallv(in->data, sc.data(), out->data, rc.data(), in->dtype, nullptr);
      });
      return;
    }
    b.alltoallv(in->data, sb, out->data, rb);
  });
}

hvd_status hvd_gpu_compute_capability(int device, int* cc) {
  return wrap_collective([&] { *cc = gpu::compute_capability(global_backend(), device); });
}

double hvd_benchmark_sum_kernel(hvd_dtype dtype, size_t count, int iterations) {
  if (!valid_dtype(dtype)) return -1.0;
  size_t bytes = count * dtype_size(dtype);
  std::vector<unsigned char> a(bytes), b(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    a[i] = static_cast<unsigned char>(i * 7);
    b[i] = static_cast<unsigned char>(i * 13);
  }
  if (dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16)  // finite, normal values
    for (size_t i = 1; i < bytes; i += 2) a[i] = b[i] = 0x3c;
  auto start = std::chrono::steady_clock::now();
  for (int it = 0; it < iterations; ++it)
    kernels::reduce(dtype, HVD_SUM, a.data(), a.data(), b.data(), count);
  auto stop = std::chrono::steady_clock::now();
  volatile unsigned char sink = a[bytes / 2];
  (void)sink;
  return std::chrono::duration<double>(stop - start).count();
}

}  // extern "C"
