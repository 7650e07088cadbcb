// The stand-in for the GPU at the plugin boundary: libhvd_nccl.so's ABI
// (native/include/hvd/nccl_plugin.h) over host memory, for tests on machines
// without a GPU. Built by the tests only (tests/nccl/nccl_helpers.py); never
// shipped.
//
// The core loads it exactly as it loads the real plugin (dlopen() of
// libhvd_nccl.so next to _core: the tests copy a built nccl variant and put
// this library in the real one's place), so everything the core does around
// a GPU collective runs for real: which tensors go to the plugin, their in
// and out buffers, dtype codes, fusion, making the communicator (the unique
// id over the CPU controller), error translation and peer failure.
// "Device" pointers are host pointers. Reductions execute the real plugin's
// plan (native/nccl/plan.h) with the CPU path's kernels
// (native/src/kernels_cpu.cpp) in place of NCCL's and the CUDA kernels, and a
// PreMulSum factor is rounded to the reduction's type as NCCL rounds it; the
// ranks meet in a shared file named by the unique id. What it cannot show:
// anything CUDA or NCCL does (kernels, streams, NCCL's own numerics and
// transports); the tests marked gpu run those on a real GPU.
//
// Knobs (environment), for the tests: HVD_STANDIN_DIR (where segments are
// made, default /dev/shm), HVD_STANDIN_DEVICES (device count, default 1),
// HVD_STANDIN_LOG (a file: one line per call, what the core passed),
// HVD_STANDIN_EXIT_AT=R:N (rank R exits inside its N-th collective, after it
// contributed: a peer dying mid-collective), HVD_STANDIN_STALL_AT=R:N (rank R
// hangs in its N-th collective), HVD_STANDIN_FAIL_UNIQUE_ID=1
// (get_unique_id fails), HVD_STANDIN_ABI (the ABI version it claims).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "hvd/nccl_plugin.h"
#include "kernels_cpu.h"
#include "plan.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxRanks = 16;
constexpr size_t kSlot = size_t{4} << 20;  // bytes one rank contributes to one collective
constexpr uint64_t kMagic = 0x68766473746e6432ull;

struct alignas(64) Header {
  uint64_t magic;
  std::atomic<uint32_t> joined;
  std::atomic<uint32_t> abort;  // a rank gave up: the others stop waiting
};
struct alignas(64) Line {
  std::atomic<uint32_t> phase;
  int32_t pid;
};
constexpr size_t kMapBytes = sizeof(Header) + sizeof(Line) * kMaxRanks + kSlot * kMaxRanks;

thread_local std::string g_last_error;

int fail(int code, const std::string& message) {
  g_last_error = message;
  return code;
}

std::string env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// "R:N" knobs: N when R is this rank, else 0.
uint64_t knob(const char* name, int rank) {
  std::string v = env(name);
  auto colon = v.find(':');
  if (colon == std::string::npos || std::atoi(v.substr(0, colon).c_str()) != rank) return 0;
  return std::strtoull(v.c_str() + colon + 1, nullptr, 10);
}

struct State {
  std::mutex mu;
  unsigned char* base = nullptr;
  std::string named;    // the segment's file while it may still have a name (unlinked once all joined)
  std::string aborted;  // why the communicator was aborted
  bool ready = false;
  int rank = 0;
  int size = 0;
  double timeout_s = 60.0;
  uint32_t phase = 0;
  uint64_t calls = 0;
  uint64_t exit_at = 0;
  uint64_t stall_at = 0;
  bool premulsum = true;
  std::function<int()> pending;  // the rest of the last collective, run by synchronize()
} g;

Header* header() { return reinterpret_cast<Header*>(g.base); }
Line& line(int r) { return reinterpret_cast<Line*>(g.base + sizeof(Header))[r]; }
unsigned char* slot(int r) {
  return g.base + sizeof(Header) + sizeof(Line) * kMaxRanks + kSlot * static_cast<size_t>(r);
}

void log_call(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_call(const char* format, ...) {
  std::string path = env("HVD_STANDIN_LOG");
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return;
  std::fprintf(f, "rank=%d ", g.rank);
  va_list args;
  va_start(args, format);
  std::vfprintf(f, format, args);
  va_end(args);
  std::fputc('\n', f);
  std::fclose(f);
}

int abort_with(int code, const std::string& reason) {
  if (g.base) header()->abort.store(1);
  g.ready = false;
  g.aborted = reason;
  g.pending = nullptr;
  return fail(code, reason);
}

void arrive() { line(g.rank).phase.store(++g.phase); }

// Waits until every rank reached `target`: a dead peer or another rank's
// abort is HVD_PLUGIN_ERR_PEER, the timeout HVD_PLUGIN_ERR_TIMEOUT.
int wait_all(uint32_t target, const char* what) {
  const auto until = Clock::now() + std::chrono::duration<double>(g.timeout_s);
  for (int r = 0; r < g.size; ++r) {
    while (line(r).phase.load() < target) {
      if (header()->abort.load())
        return abort_with(HVD_PLUGIN_ERR_PEER, std::string(what) + ": stand-in: another rank aborted");
      if (hvd::process_gone(line(r).pid))
        return abort_with(HVD_PLUGIN_ERR_PEER, std::string(what) + ": stand-in: rank " + std::to_string(r) +
                                                   " (process " + std::to_string(line(r).pid) + ") is gone");
      if (Clock::now() > until)
        return abort_with(HVD_PLUGIN_ERR_TIMEOUT, std::string(what) + ": stand-in: rank " +
                                                      std::to_string(r) + " did not arrive in time");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  return 0;
}

int usable() {
  if (g.ready) return 0;
  if (!g.aborted.empty())
    return fail(HVD_PLUGIN_ERR_PEER,
                "the stand-in communicator was aborted after an earlier failure (" + g.aborted + ")");
  return fail(HVD_PLUGIN_ERR_INVALID, "the NCCL communicator is not initialized: call init() first");
}

int begin(int dtype) {
  if (int rc = usable()) return rc;
  if (hvd_nccl::dtype_bytes(dtype) == 0)
    return fail(HVD_PLUGIN_ERR_INVALID, "unknown dtype " + std::to_string(dtype));
  return 0;
}

// Contributes (this rank's slot holds its data), then the knobs, then the rest
// runs in synchronize(): wait for everyone, `finish` (reads the slots), wait
// again so nobody overwrites a slot still being read.
int collective(const char* what, const std::function<void()>& finish) {
  ++g.calls;
  if (g.calls == g.stall_at) std::this_thread::sleep_for(std::chrono::duration<double>(g.timeout_s + 2));
  arrive();
  if (g.calls == g.exit_at) _exit(3);
  const uint32_t contributed = g.phase;
  g.pending = [what, finish, contributed] {
    if (int rc = wait_all(contributed, what)) return rc;
    finish();
    arrive();
    return wait_all(g.phase, what);
  };
  return 0;
}

hvd_dtype core_type(hvd_nccl::Wire wire) {
  switch (wire) {
    case hvd_nccl::Wire::Uint8: return HVD_UINT8;
    case hvd_nccl::Wire::Int8: return HVD_INT8;
    case hvd_nccl::Wire::Int32:
    case hvd_nccl::Wire::Uint32: return HVD_INT32;
    case hvd_nccl::Wire::Int64: return HVD_INT64;
    case hvd_nccl::Wire::Float16: return HVD_FLOAT16;
    case hvd_nccl::Wire::Bfloat16: return HVD_BFLOAT16;
    case hvd_nccl::Wire::Float32: return HVD_FLOAT32;
    case hvd_nccl::Wire::Float64: return HVD_FLOAT64;
  }
  return HVD_UINT8;
}

hvd_op core_op(hvd_nccl::Red red) {
  switch (red) {
    case hvd_nccl::Red::Prod: return HVD_PRODUCT;
    case hvd_nccl::Red::Min: return HVD_MIN;
    case hvd_nccl::Red::Max: return HVD_MAX;
    default: return HVD_SUM;
  }
}

// A factor as the wire type holds it: what NCCL does with a PreMulSum
// scalar, and what the float16 scaling kernel does with its factor.
double held_in(hvd_nccl::Wire wire, double factor) {
  if (wire == hvd_nccl::Wire::Float64) return factor;
  if (wire == hvd_nccl::Wire::Float32) return static_cast<float>(factor);
  uint16_t one = wire == hvd_nccl::Wire::Float16 ? 0x3c00 : 0x3f80, held = 0;
  hvd::kernels::scale(core_type(wire), &held, &one, 1, factor);  // 1.0 * factor, rounded to the type
  if (wire == hvd_nccl::Wire::Bfloat16) {
    uint32_t bits = static_cast<uint32_t>(held) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  int exponent = (held >> 10) & 0x1f, mantissa = held & 0x3ff;
  double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (held & 0x8000) ? -magnitude : magnitude;
}

// out[i] = a[i] (red) b[i] in the wire type (NCCL's part).
void reduce_wire(const hvd_nccl::Plan& plan, void* out, const void* a, const void* b, size_t n) {
  if (plan.wire != hvd_nccl::Wire::Uint32)
    return hvd::kernels::reduce(core_type(plan.wire), core_op(plan.red), out, a, b, n);
  auto* o = static_cast<uint32_t*>(out);
  auto* x = static_cast<const uint32_t*>(a);
  auto* y = static_cast<const uint32_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = plan.red == hvd_nccl::Red::Prod ? x[i] * y[i] : x[i] + y[i];  // wraps
}

// A scaling pass (the CUDA kernels' part): dst = src * factor in `dtype`,
// float16 by the factor rounded to float16 (kernels.cu, Horovod's GPU rule).
void scale(int dtype, void* dst, const void* src, size_t n, double factor) {
  if (factor == 1.0) {
    if (dst != src) std::memmove(dst, src, n * hvd_nccl::dtype_bytes(dtype));
    return;
  }
  if (dtype == HVD_PLUGIN_FLOAT16) factor = held_in(hvd_nccl::Wire::Float16, factor);
  hvd::kernels::scale(static_cast<hvd_dtype>(dtype), dst, src, n, factor);
}

// ------------------------------------------------------------ the reductions
int reduce(const char* what, const void* const* sends, void* const* recvs, const size_t* counts, size_t n,
           int dtype, int op, double prescale, double postscale, bool fold) {
  if (int rc = begin(dtype)) return rc;
  hvd_nccl::Plan plan = hvd_nccl::plan_reduction(dtype, op, prescale, postscale, g.size, fold && g.premulsum);
  if (plan.error) return fail(HVD_PLUGIN_ERR_INVALID, std::string(plan.error) + " " + std::to_string(op));
  const size_t wire = hvd_nccl::wire_bytes(plan.wire);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    total += counts[i];
    log_call(
        "%s send=%p recv=%p count=%zu dtype=%d op=%d pre=%g post=%g wire=%d red=%d widen=%d plan_pre=%g "
        "premul=%g "
        "plan_post=%g",
        what, sends[i], static_cast<void*>(recvs[i]), counts[i], dtype, op, prescale, postscale,
        static_cast<int>(plan.wire), static_cast<int>(plan.red), plan.widen ? 1 : 0, plan.pre, plan.premul,
        plan.post);
  }
  if (total * wire > kSlot) return fail(HVD_PLUGIN_ERR_INVALID, "stand-in: at most 4 MiB per collective");
  // This rank's contribution in the wire type: the pre pass, or the prescale NCCL's PreMulSum applies.
  double factor =
      plan.red == hvd_nccl::Red::PreMulSum ? held_in(plan.wire, plan.premul) : plan.pre;
  unsigned char* mine = slot(g.rank);
  std::vector<int16_t> narrow;
  for (size_t i = 0, at = 0; i < n; at += counts[i] * wire, ++i) {
    if (!plan.widen) {
      scale(dtype, mine + at, sends[i], counts[i], factor);
      continue;
    }
    narrow.resize(counts[i]);
    scale(dtype, narrow.data(), sends[i], counts[i], factor);
    auto* widened = reinterpret_cast<int32_t*>(mine + at);
    for (size_t j = 0; j < counts[i]; ++j) widened[j] = narrow[j];  // sign-extended
  }
  std::vector<void*> outs(recvs, recvs + n);
  std::vector<size_t> sizes(counts, counts + n);
  return collective(what, [plan, dtype, wire, total, outs, sizes] {
    std::vector<unsigned char> acc(slot(0), slot(0) + total * wire);
    for (int r = 1; r < g.size; ++r) reduce_wire(plan, acc.data(), acc.data(), slot(r), total);
    std::vector<int16_t> narrow;
    for (size_t i = 0, at = 0; i < outs.size(); at += sizes[i] * wire, ++i) {
      if (!plan.widen) {
        scale(dtype, outs[i], acc.data() + at, sizes[i], plan.post);
        continue;
      }
      narrow.resize(sizes[i]);
      auto* widened = reinterpret_cast<const uint32_t*>(acc.data() + at);
      for (size_t j = 0; j < sizes[i]; ++j) narrow[j] = static_cast<int16_t>(widened[j] & 0xffffu);
      scale(dtype, outs[i], narrow.data(), sizes[i], plan.post);
    }
  });
}

// ------------------------------------------------------------ entry points
int abi_version() { return std::atoi(env("HVD_STANDIN_ABI", "2").c_str()); }

const char* last_error() { return g_last_error.c_str(); }
const char* versions() { return "stand-in=host-memory cuda_runtime=none cuda_driver=none nccl=none"; }

int device_count() {
  int n = std::atoi(env("HVD_STANDIN_DEVICES", "1").c_str());
  if (n <= 0) fail(HVD_PLUGIN_ERR_INTERNAL, "stand-in: no device (HVD_STANDIN_DEVICES=0)");
  return n > 0 ? n : 0;
}

int compute_capability(int, int* cc) {
  *cc = 80;  // the tests' nccl variant is built for cuda_arch=80
  return 0;
}

int get_unique_id(void* out) {
  if (env("HVD_STANDIN_FAIL_UNIQUE_ID") == "1")
    return fail(HVD_PLUGIN_ERR_INTERNAL, "stand-in: no unique id today");
  std::random_device random;
  std::string path = env("HVD_STANDIN_DIR", "/dev/shm") + "/hvd-standin-" + std::to_string(getpid()) + "-" +
                     std::to_string(random());
  if (path.size() >= HVD_NCCL_UNIQUE_ID_BYTES)
    return fail(HVD_PLUGIN_ERR_INTERNAL, "stand-in: path too long");
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return fail(HVD_PLUGIN_ERR_INTERNAL, "stand-in: cannot create " + path + ": " + std::strerror(errno));
  Header h{};
  h.magic = kMagic;
  bool ok = ftruncate(fd, static_cast<off_t>(kMapBytes)) == 0 && pwrite(fd, &h.magic, sizeof h.magic, 0) == 8;
  close(fd);
  if (!ok) return fail(HVD_PLUGIN_ERR_INTERNAL, "stand-in: cannot size " + path);
  std::lock_guard<std::mutex> lock(g.mu);
  g.named = path;  // rank 0 unlinks it once every rank joined (or at finalize)
  std::memset(out, 0, HVD_NCCL_UNIQUE_ID_BYTES);
  std::memcpy(out, path.data(), path.size());
  return 0;
}

void unmap() {
  if (g.base) munmap(g.base, kMapBytes);
  g.base = nullptr;
  g.ready = false;
  g.aborted.clear();
  g.pending = nullptr;
}

// Everything this rank holds, the segment's name included.
void release() {
  if (!g.named.empty()) unlink(g.named.c_str());
  g.named.clear();
  unmap();
}

int init(int rank, int size, const void* unique_id, int device, double timeout_s) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.ready)
    return fail(HVD_PLUGIN_ERR_INVALID,
                "init: the NCCL communicator is already initialized: call finalize() first");
  unmap();  // what an aborted communicator left
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size)
    return fail(HVD_PLUGIN_ERR_INVALID,
                "init: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size) + ")");
  std::string path(static_cast<const char*>(unique_id),
                   strnlen(static_cast<const char*>(unique_id), HVD_NCCL_UNIQUE_ID_BYTES));
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return fail(HVD_PLUGIN_ERR_INTERNAL, "stand-in: cannot open " + path + ": " + std::strerror(errno));
  void* p = mmap(nullptr, kMapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return fail(HVD_PLUGIN_ERR_INTERNAL, "stand-in: mmap failed");
  g.base = static_cast<unsigned char*>(p);
  if (header()->magic != kMagic)
    return fail(HVD_PLUGIN_ERR_INTERNAL, "stand-in: " + path + " is no stand-in segment");
  g.rank = rank;
  g.size = size;
  g.timeout_s = timeout_s > 0 ? timeout_s : 60.0;
  log_call("init size=%d device=%d timeout=%g", size, device, timeout_s);
  g.phase = 0;
  g.calls = 0;
  g.exit_at = knob("HVD_STANDIN_EXIT_AT", rank);
  g.stall_at = knob("HVD_STANDIN_STALL_AT", rank);
  g.premulsum = env("HVD_SELECTOR_NCCL_PREMULSUM") != "0";
  line(rank).pid = getpid();
  header()->joined.fetch_add(1);
  const auto until = Clock::now() + std::chrono::duration<double>(g.timeout_s);
  while (header()->joined.load() < static_cast<uint32_t>(size)) {
    if (Clock::now() > until) {
      int rc = fail(HVD_PLUGIN_ERR_TIMEOUT, "init: not every rank joined the stand-in communicator in time");
      release();
      return rc;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!g.named.empty()) unlink(g.named.c_str());
  g.named.clear();
  g.ready = true;
  return 0;
}

int finalize() {
  std::lock_guard<std::mutex> lock(g.mu);
  log_call("finalize");
  release();
  return 0;
}

int abort_comm() {
  std::lock_guard<std::mutex> lock(g.mu);
  log_call("abort");
  if (g.ready) abort_with(HVD_PLUGIN_ERR_PEER, "aborted by the caller");
  return 0;
}

int allreduce(const void* send, void* recv, size_t count, int dtype, int op, double prescale,
              double postscale, void*) {
  std::lock_guard<std::mutex> lock(g.mu);
  const void* sends[] = {send};
  void* recvs[] = {recv};
  return reduce("allreduce", sends, recvs, &count, 1, dtype, op, prescale, postscale, true);
}

int grouped_allreduce(const void* const* sends, void* const* recvs, const size_t* counts, size_t n, int dtype,
                      int op, double prescale, double postscale, void*) {
  std::lock_guard<std::mutex> lock(g.mu);
  return reduce("grouped_allreduce", sends, recvs, counts, n, dtype, op, prescale, postscale, false);
}

int allgatherv(const void* send, void* recv, const size_t* recv_counts, int dtype, void*) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (int rc = begin(dtype)) return rc;
  const size_t elem = hvd_nccl::dtype_bytes(dtype);
  log_call("allgatherv send=%p recv=%p mine=%zu dtype=%d", send, recv, recv_counts[g.rank], dtype);
  if (recv_counts[g.rank] * elem > kSlot)
    return fail(HVD_PLUGIN_ERR_INVALID, "stand-in: at most 4 MiB per collective");
  std::memcpy(slot(g.rank), send, recv_counts[g.rank] * elem);
  std::vector<size_t> bytes(recv_counts, recv_counts + g.size);
  for (size_t& b : bytes) b *= elem;
  return collective("allgatherv", [recv, bytes] {
    auto* out = static_cast<unsigned char*>(recv);
    for (int r = 0; r < g.size; out += bytes[r], ++r) std::memcpy(out, slot(r), bytes[r]);
  });
}

int broadcast(void* buf, size_t count, int dtype, int root, void*) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (int rc = begin(dtype)) return rc;
  if (root < 0 || root >= g.size)
    return fail(HVD_PLUGIN_ERR_INVALID,
                "broadcast: root " + std::to_string(root) + " is not in [0, " + std::to_string(g.size) + ")");
  const size_t bytes = count * hvd_nccl::dtype_bytes(dtype);
  log_call("broadcast buf=%p count=%zu dtype=%d root=%d", buf, count, dtype, root);
  if (bytes > kSlot) return fail(HVD_PLUGIN_ERR_INVALID, "stand-in: at most 4 MiB per collective");
  if (g.rank == root) std::memcpy(slot(root), buf, bytes);
  return collective("broadcast", [buf, bytes, root] {
    if (g.rank != root) std::memcpy(buf, slot(root), bytes);
  });
}

int alltoallv(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts, int dtype,
              void*) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (int rc = begin(dtype)) return rc;
  const size_t elem = hvd_nccl::dtype_bytes(dtype);
  log_call("alltoallv send=%p recv=%p dtype=%d", send, recv, dtype);
  // The slot: every destination's byte count, then the data in rank order.
  auto* counts = reinterpret_cast<uint64_t*>(slot(g.rank));
  size_t total = 0;
  for (int r = 0; r < g.size; ++r) total += counts[r] = send_counts[r] * elem;
  if (total + sizeof(uint64_t) * kMaxRanks > kSlot)
    return fail(HVD_PLUGIN_ERR_INVALID, "stand-in: at most 4 MiB per collective");
  std::memcpy(slot(g.rank) + sizeof(uint64_t) * kMaxRanks, send, total);
  std::vector<size_t> want(recv_counts, recv_counts + g.size);
  for (size_t& b : want) b *= elem;
  return collective("alltoallv", [recv, want] {
    auto* out = static_cast<unsigned char*>(recv);
    for (int r = 0; r < g.size; out += want[r], ++r) {
      const auto* theirs = reinterpret_cast<const uint64_t*>(slot(r));
      size_t offset = 0;
      for (int q = 0; q < g.rank; ++q) offset += theirs[q];
      std::memcpy(out, slot(r) + sizeof(uint64_t) * kMaxRanks + offset, want[r]);
    }
  });
}

int synchronize(void*) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (int rc = usable()) return rc;
  if (!g.pending) return 0;
  auto rest = std::move(g.pending);
  g.pending = nullptr;
  return rest();
}

hvd_nccl_plugin g_table = {
    HVD_NCCL_PLUGIN_ABI, last_error, versions,  device_count, compute_capability,
    get_unique_id,       init,       finalize,  abort_comm,   allreduce,
    grouped_allreduce,   allgatherv, broadcast, alltoallv,    synchronize,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const hvd_nccl_plugin* hvd_nccl_plugin_get(void) {
  g_table.abi_version = abi_version();
  return &g_table;
}
