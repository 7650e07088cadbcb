// Horovod's tensor fusion for grouped allreduce: consecutive tensors of one
// dtype are packed (with prescale) into a fusion buffer of at most the
// threshold, reduced with one agreement check and one collective, and
// unpacked (with postscale). A tensor larger than the threshold is reduced
// on its own without a copy.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu.h"
#include "kernels_cpu.h"
#include "state.h"

namespace hvd {

namespace {

constexpr size_t kDefaultThreshold = size_t{64} << 20;  // 64 MiB, Horovod's default
std::string g_threshold_error;

size_t initial_threshold() {
  const char* env = std::getenv("HOROVOD_FUSION_THRESHOLD");
  if (!env || !*env) return kDefaultThreshold;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(env, &end, 10);
  if (std::isdigit(static_cast<unsigned char>(env[0])) && end && *end == '\0' && errno == 0)
    return static_cast<size_t>(v);
  g_threshold_error = "HOROVOD_FUSION_THRESHOLD='" + std::string(env).substr(0, 40) +
                      "' is not a number of bytes; give bytes (0 turns fusion off) or unset it (64 MiB)";
  return kDefaultThreshold;
}

size_t g_threshold = initial_threshold();
std::vector<unsigned char> g_fusion_buffer;

// One fused chunk: tensors [begin, end) of the same dtype.
void reduce_chunk(const hvd_tensor* in, hvd_tensor* out, size_t begin, size_t end, hvd_op op, double prescale,
                  double postscale) {
  Backend& b = backend();
  hvd_dtype dtype = in[begin].dtype;
  size_t esize = dtype_size(dtype);
  Descriptor d = describe(Kind::Grouped, nullptr, op, -1);
  d.dtype = dtype;
  d.device = in[begin].device;
  d.shape[0] = static_cast<int64_t>(end - begin);
  uint64_t h = 0xcbf29ce484222325ull;
  size_t total = 0;
  for (size_t i = begin; i < end; ++i) {
    total += static_cast<size_t>(num_elements(in[i]));
    h = mix(h, static_cast<uint64_t>(in[i].ndim));
    for (int k = 0; k < in[i].ndim; ++k) h = mix(h, static_cast<uint64_t>(in[i].shape[k]));
  }
  d.shape[1] = static_cast<int64_t>(total);
  d.extra = h;
  double post = op == HVD_AVERAGE ? postscale / b.size() : postscale;

  if (in[begin].device == HVD_DEVICE_CUDA) {  // the plugin packs from in, unpacks into out
    std::vector<const void*> sends;
    std::vector<void*> recvs;
    std::vector<size_t> counts;
    for (size_t i = begin; i < end; ++i) {
      sends.push_back(in[i].data);
      recvs.push_back(out[i].data);
      counts.push_back(static_cast<size_t>(num_elements(in[i])));
    }
    agree(d, false);
    gpu::run(b, "grouped_allreduce", [&](const hvd_nccl_plugin& p) {
      return p.grouped_allreduce(sends.data(), recvs.data(), counts.data(), counts.size(), dtype, op,
                                 prescale, postscale, nullptr);
    });
    return;
  }

  if (end - begin == 1) {  // alone: no packing
    size_t n = static_cast<size_t>(num_elements(in[begin]));
    const void* src = in[begin].data;
    if (prescale != 1.0) {
      kernels::scale(dtype, out[begin].data, in[begin].data, n, prescale);
      src = nullptr;
    }
    reduce_agreed(d, src, out[begin].data, n, dtype, op);
    if (post != 1.0) kernels::scale(dtype, out[begin].data, out[begin].data, n, post);
    return;
  }
  // Outputs that lie back to back in memory (the binding's grouped_allreduce_numpy, or
  // views of one buffer) are the fusion buffer themselves: no unpacking,
  // unless an input lies inside that span anywhere but at its own place.
  auto* first = static_cast<unsigned char*>(out[begin].data);
  bool contiguous = true;
  for (size_t i = begin, at = 0; i < end && contiguous; ++i) {
    auto* src = static_cast<const unsigned char*>(in[i].data);
    size_t bytes = static_cast<size_t>(num_elements(in[i])) * esize;
    bool apart = src + bytes <= first || src >= first + total * esize;
    contiguous = out[i].data == first + at && (src == first + at || apart);
    at += bytes;
  }
  if (!contiguous && g_fusion_buffer.size() < total * esize) g_fusion_buffer.resize(total * esize);
  unsigned char* buf = contiguous ? first : g_fusion_buffer.data();
  size_t offset = 0;
  for (size_t i = begin; i < end; ++i) {
    size_t n = static_cast<size_t>(num_elements(in[i]));
    if (prescale != 1.0)
      kernels::scale(dtype, buf + offset, in[i].data, n, prescale);
    else if (buf + offset != in[i].data)
      std::memmove(buf + offset, in[i].data, n * esize);
    offset += n * esize;
  }
  reduce_agreed(d, nullptr, buf, total, dtype, op);
  if (contiguous) {
    if (post != 1.0) kernels::scale(dtype, buf, buf, total, post);
    return;
  }
  offset = 0;
  for (size_t i = begin; i < end; ++i) {
    size_t n = static_cast<size_t>(num_elements(in[i]));
    if (post != 1.0)
      kernels::scale(dtype, out[i].data, buf + offset, n, post);
    else
      std::memcpy(out[i].data, buf + offset, n * esize);
    offset += n * esize;
  }
}

}  // namespace

const std::string& fusion_threshold_error() { return g_threshold_error; }
}  // namespace hvd

using namespace hvd;

extern "C" {

size_t hvd_fusion_threshold(void) { return g_threshold; }
void hvd_set_fusion_threshold(size_t bytes) { g_threshold = bytes; }

hvd_status hvd_grouped_allreduce(const hvd_tensor* in, hvd_tensor* out, size_t n, hvd_op op, double prescale,
                                 double postscale) {
  return wrap_collective([&] {
    if (!valid_op(op)) throw Error(HVD_ERR_INVALID, "grouped_allreduce: unknown op " + std::to_string(op));
    for (size_t i = 0; i < n; ++i) {
      std::string what = "grouped_allreduce: tensor " + std::to_string(i);
      check_tensor(&in[i], what.c_str());
      check_tensor(&out[i], what.c_str());
      if (in[i].dtype != out[i].dtype || num_elements(in[i]) != num_elements(out[i]) ||
          in[i].device != out[i].device)
        throw Error(HVD_ERR_INVALID, what + ": output does not match input");
      if (in[i].device == HVD_DEVICE_CUDA) gpu::check(backend(), what.c_str(), {&in[i], &out[i]});
    }
    backend();
    size_t begin = 0;
    while (begin < n) {
      size_t esize = dtype_size(in[begin].dtype);
      size_t bytes = static_cast<size_t>(num_elements(in[begin])) * esize;
      size_t end = begin + 1;
      while (end < n && in[end].dtype == in[begin].dtype && in[end].device == in[begin].device) {
        size_t more = static_cast<size_t>(num_elements(in[end])) * esize;
        if (bytes + more > g_threshold) break;
        bytes += more;
        ++end;
      }
      reduce_chunk(in, out, begin, end, op, prescale, postscale);
      begin = end;
    }
  });
}

}  // extern "C"
