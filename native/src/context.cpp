// Initialisation, finalisation, identity and build facts of the core, plus
// the cross-rank agreement check shared by all ops.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "gpu.h"
#include "kernels_cpu.h"
#include "state.h"

namespace hvd {
namespace {

std::unique_ptr<Backend> g_backend;
thread_local std::string g_last_error;
std::vector<unsigned char> g_agree_buffer;  // reused: no allocation per collective

const char* kind_name(uint32_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::Allreduce: return "allreduce";
    case Kind::Grouped: return "grouped_allreduce";
    case Kind::Allgather: return "allgather";
    case Kind::Broadcast: return "broadcast";
    case Kind::Alltoall: return "alltoall";
    case Kind::Barrier: return "barrier";
  }
  return "unknown";
}

// Whether a descriptor holds only values this rank can describe and act on.
// Every field may come from a peer's bytes (an authenticated peer of another
// build, or a rank whose transport is out of step), so nothing in it is used
// as a count or a length before this says yes.
bool well_formed(const Descriptor& d) {
  if (d.magic != Descriptor{}.magic || d.kind < static_cast<uint32_t>(Kind::Allreduce) ||
      d.kind > static_cast<uint32_t>(Kind::Barrier))
    return false;
  if (d.ndim < 0 || d.ndim > HVD_MAX_DIMS) return false;
  for (int i = 0; i < HVD_MAX_DIMS; ++i)
    if (d.shape[i] < 0) return false;
  if (static_cast<Kind>(d.kind) == Kind::Barrier) return true;
  return valid_dtype(d.dtype) && (d.op == -1 || valid_op(d.op)) && d.root >= -1 &&
         (d.device == HVD_DEVICE_CPU || d.device == HVD_DEVICE_CUDA);
}

std::string explain(const Descriptor& d, bool vary_first_dim) {
  if (!well_formed(d)) return "nothing this build can read (another build's or out-of-step bytes)";
  std::string s = kind_name(d.kind);
  if (static_cast<Kind>(d.kind) == Kind::Barrier) return s;
  if (static_cast<Kind>(d.kind) == Kind::Grouped) {
    s += " of " + std::to_string(d.shape[0]) + " tensors (" + std::to_string(d.shape[1]) + " elements, " +
         dtype_name(static_cast<hvd_dtype>(d.dtype)) + ")";
  } else {
    hvd_tensor t{};
    t.dtype = static_cast<hvd_dtype>(d.dtype);
    t.ndim = d.ndim;
    std::memcpy(t.shape, d.shape, sizeof(t.shape));
    std::string shape = shape_string(t);
    if (vary_first_dim && d.ndim > 0) {
      auto open = shape.find('[');
      auto comma = shape.find_first_of(",]", open);
      shape = shape.substr(0, open + 1) + "*" + shape.substr(comma);
    }
    s += " " + shape;
  }
  if (d.op >= 0) s += std::string(" op=") + op_name(static_cast<hvd_op>(d.op));
  if (d.root >= 0) s += " root=" + std::to_string(d.root);
  if (d.device == HVD_DEVICE_CUDA) s += " on GPU";
  return s;
}

bool same(const Descriptor& a, const Descriptor& b, bool vary_first_dim) {
  if (!well_formed(a) || !well_formed(b)) return false;
  if (a.magic != b.magic || a.kind != b.kind || a.dtype != b.dtype || a.op != b.op || a.root != b.root ||
      a.ndim != b.ndim || a.device != b.device || a.extra != b.extra)
    return false;
  for (int i = vary_first_dim ? 1 : 0; i < HVD_MAX_DIMS; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

// The settings every rank must share, compared once at init() before the
// ranks exchange anything else: ranks that disagree would otherwise run
// different protocols (HVD_SELECTOR_SHM decides whether shared memory wraps
// the network backend at all) and crash or hang instead of failing. A record
// has a fixed size, so even disagreeing ranks exchange equal-sized messages.
struct SettingsRecord {
  uint32_t magic = 0x48565331u;  // "HVS1"
  int32_t shm = 1;
  uint64_t slot_bytes = 0;
  uint64_t fusion_bytes = 0;
  char error[240] = {0};  // this rank's own malformed setting, if any
};

SettingsRecord my_settings(const ShmSettings& shm) {
  SettingsRecord mine;
  mine.shm = shm.enabled ? 1 : 0;
  mine.slot_bytes = shm.slot_bytes;
  mine.fusion_bytes = hvd_fusion_threshold();
  const std::string& error = shm.error.empty() ? fusion_threshold_error() : shm.error;
  std::strncpy(mine.error, error.c_str(), sizeof(mine.error) - 1);
  return mine;
}

// "0-3,5,7" for ranks in ascending order, at most `limit` items.
std::string rank_list(const std::vector<int>& ranks, size_t limit = 8) {
  std::string s;
  size_t items = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items++ == limit) return s + ",...";
    s += (s.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) s += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j;
  }
  return s;
}

// "" when every rank has the same value, else one line naming the setting, each value and its ranks.
template <typename Value>
std::string disagreement(const std::vector<SettingsRecord>& all, const char* name,
                         Value (*value)(const SettingsRecord&)) {
  std::vector<std::pair<Value, std::vector<int>>> groups;
  for (size_t r = 0; r < all.size(); ++r) {
    Value v = value(all[r]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end())
      groups.push_back({v, {static_cast<int>(r)}});
    else
      it->second.push_back(static_cast<int>(r));
  }
  if (groups.size() < 2) return "";
  std::string text = std::string(name) + " differs between ranks (";
  for (size_t g = 0; g < groups.size() && g < 4; ++g)
    text += (g ? "; " : "") + std::to_string(groups[g].first) + " on rank" +
            (groups[g].second.size() > 1 ? "s " : " ") + rank_list(groups[g].second);
  return text + (groups.size() > 4 ? "; ..." : "") +
         "); every rank must use the same value: set it once where the job starts (exported to every "
         "rank), not per rank";
}

// The verdict on every rank's record (peers' records are untrusted bytes): "" or one line.
std::string judge(std::vector<SettingsRecord>& all) {
  for (size_t r = 0; r < all.size(); ++r) {
    all[r].error[sizeof(all[r].error) - 1] = 0;  // a peer's text ends inside its record, whatever it sent
    if (all[r].magic != SettingsRecord{}.magic)
      return "rank " + std::to_string(r) +
             " sent no settings record at init (another release of hvd_selector?)";
  }
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].error[0]) return "rank " + std::to_string(r) + ": " + std::string(all[r].error);
  std::string text =
      disagreement<int32_t>(all, "HVD_SELECTOR_SHM", [](const SettingsRecord& s) { return s.shm; });
  if (text.empty() && all[0].shm)
    text = disagreement<uint64_t>(all, "HVD_SELECTOR_SHM_SLOT",
                                  [](const SettingsRecord& s) { return s.slot_bytes; });
  if (text.empty())
    text = disagreement<uint64_t>(all, "HOROVOD_FUSION_THRESHOLD (fusion_threshold())",
                                  [](const SettingsRecord& s) { return s.fusion_bytes; });
  return text;
}

// One allgather over the network backend (the gloo mesh or MPI), before
// shared memory wraps it: the mesh itself does not depend on these settings,
// and one exchange of records costs less than a store request per rank with
// rank 0 reading every rank's record.
void agree_settings(Backend& net, const ShmSettings& shm) {
  SettingsRecord mine = my_settings(shm);
  std::vector<SettingsRecord> all(net.size());
  net.allgather(&mine, all.data(), sizeof(SettingsRecord));
  std::string verdict = judge(all);
  if (!verdict.empty()) throw Error(HVD_ERR_INVALID, verdict);
}

}  // namespace

Backend& global_backend() {
  if (!g_backend)
    throw Error(HVD_ERR_NOT_INITIALIZED, "hvd_selector is not initialised: call hvd_selector.init() first");
  return *g_backend;
}

Backend& backend() {
  Backend& global = global_backend();
  int id = current_process_set();
  return id ? process_set_backend(id) : global;
}

void set_last_error(const std::string& message) { g_last_error = message; }

std::unique_ptr<Backend> Backend::subset(int, const std::vector<int>&, const hvd_store*, const std::string&,
                                         double) {
  throw Error(HVD_ERR_UNAVAILABLE, "process sets are not supported over the " + transport() + " transport");
}

Descriptor describe(Kind kind, const hvd_tensor* t, int op, int root) {
  Descriptor d;
  d.kind = static_cast<uint32_t>(kind);
  d.op = op;
  d.root = root;
  if (t) {
    d.dtype = t->dtype;
    d.ndim = t->ndim;
    d.device = t->device;
    for (int i = 0; i < t->ndim; ++i) d.shape[i] = t->shape[i];
  }
  return d;
}

void Backend::gather_blocks(const void*, size_t, std::vector<const unsigned char*>&, std::vector<size_t>&) {
  throw Error(HVD_ERR_INTERNAL, "the " + transport() + " transport has no agreement blocks");
}

size_t carry_limit(const Backend& b, bool every_rank_carries) {
  if (b.sized_slots()) return b.inline_limit();
  if (b.block_limit() <= kSummaryBytes || b.size() < 2) return 0;
  return (b.block_limit() - kSummaryBytes) / (every_rank_carries ? static_cast<size_t>(b.size()) : 1);
}

void check_agreement_impl(const std::vector<Descriptor>& all, bool vary_first_dim);

namespace {

// A descriptor as 64 bits (shape[0] left out where it may vary): what the
// compact agreement round carries instead of the descriptor.
uint64_t digest(const Descriptor& d, bool vary_first_dim) {
  Descriptor c = d;
  if (vary_first_dim) c.shape[0] = 0;
  uint64_t words[sizeof(Descriptor) / sizeof(uint64_t)];
  std::memcpy(words, &c, sizeof(words));
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t w : words) h = mix(h, w);
  return h;
}

struct Summary {
  uint64_t digest;
  int64_t first_dim;
};
static_assert(sizeof(Summary) == kSummaryBytes, "a summary is 16 bytes");

// The compact agreement round: an allgather of 16 bytes per rank ({digest,
// shape[0]}) instead of a descriptor and a fixed payload slot. On the gloo
// mesh each rank's block is its summary followed by the payload it carries
// (`carried` bytes, often none), so a small collective's data travels in
// this same round; the blocks' lengths may differ, so ranks that disagree
// still take part in the same exchange. Every rank decides from the same
// gathered bytes, so all of them answer alike. false (some rank differs)
// sends them all to the full round, whose descriptors name the difference.
bool agree_compact(Backend& b, const Descriptor& mine, bool vary_first_dim, const void* payload,
                   size_t carried, std::vector<Descriptor>& all, std::vector<const unsigned char*>* payloads,
                   std::vector<size_t>* sizes) {
  all.assign(b.size(), mine);
  Summary own{digest(mine, vary_first_dim), mine.shape[0]};
  static std::vector<const unsigned char*> blocks;  // under the agreement round's one caller at a time
  static std::vector<size_t> lengths;
  static std::vector<Summary> summaries;
  summaries.resize(b.size());
  if (b.block_limit() > 0) {
    std::vector<unsigned char>& send = g_agree_buffer;
    if (send.size() < kSummaryBytes + carried) send.resize(kSummaryBytes + carried);
    std::memcpy(send.data(), &own, kSummaryBytes);
    if (carried) kernels::copy(send.data() + kSummaryBytes, payload, carried);
    b.gather_blocks(send.data(), kSummaryBytes + carried, blocks, lengths);
    for (int r = 0; r < b.size(); ++r) {
      if (lengths[r] < kSummaryBytes) return false;
      std::memcpy(&summaries[r], blocks[r], kSummaryBytes);
    }
  } else {
    b.allgather(&own, summaries.data(), kSummaryBytes);
  }
  for (int r = 0; r < b.size(); ++r) {
    if (summaries[r].digest != summaries[0].digest || summaries[r].first_dim < 0) return false;
    all[r].shape[0] = summaries[r].first_dim;
  }
  if (payloads) {  // without blocks (MPI, a hierarchy's wrapper) nobody carried anything
    const bool carried_any = b.block_limit() > 0;
    payloads->assign(b.size(), nullptr);
    sizes->assign(b.size(), 0);
    for (int r = 0; r < b.size() && carried_any; ++r) {
      (*payloads)[r] = blocks[r] + kSummaryBytes;
      (*sizes)[r] = lengths[r] - kSummaryBytes;
    }
  }
  return true;
}

}  // namespace

std::vector<Descriptor> agree(const Descriptor& mine, bool vary_first_dim, const void* payload,
                              size_t inline_bytes, std::vector<const unsigned char*>* payloads,
                              std::vector<size_t>* sizes) {
  Backend& b = backend();
  forget_gathered();
  if (inline_bytes > carry_limit(b, false) || (payloads && !sizes))
    throw Error(HVD_ERR_INTERNAL, "agreement payload larger than the transport carries");
  const size_t carried = payload ? inline_bytes : 0;
  // Network: the compact round first (with the payload on the gloo mesh);
  // the full one only when it found a difference (then on every rank).
  if (!b.sized_slots() && b.size() > 1) {
    std::vector<Descriptor> all;
    if (agree_compact(b, mine, vary_first_dim, payload, carried, all, payloads, sizes)) return all;
  }
  // Network: whole descriptors, the same size on every rank. Shared memory:
  // slots sized to this call (a disagreeing rank's descriptor is still read
  // whole from the front of its slot).
  const size_t slot = sizeof(Descriptor) + (b.sized_slots() ? inline_bytes : 0);
  std::vector<unsigned char>& all = g_agree_buffer;
  if (all.size() < slot * (b.size() + 1)) all.resize(slot * (b.size() + 1));
  unsigned char* send = all.data() + slot * b.size();
  std::memcpy(send, &mine, sizeof(Descriptor));
  if (b.sized_slots() && carried) kernels::copy(send + sizeof(Descriptor), payload, carried);
  const size_t filled = sizeof(Descriptor) + (b.sized_slots() ? carried : 0);
  std::memset(send + filled, 0, slot - filled);
  b.allgather(send, all.data(), slot);
  std::vector<Descriptor> descriptors(b.size());
  for (int r = 0; r < b.size(); ++r) std::memcpy(&descriptors[r], all.data() + r * slot, sizeof(Descriptor));
  check_agreement_impl(descriptors, vary_first_dim);
  if (payloads) {  // shared memory (the network's full round only runs to throw above, or at one rank)
    payloads->resize(b.size());
    sizes->assign(b.size(), b.sized_slots() ? inline_bytes : 0);
    for (int r = 0; r < b.size(); ++r) (*payloads)[r] = all.data() + r * slot + sizeof(Descriptor);
  }
  return descriptors;
}

void check_agreement_impl(const std::vector<Descriptor>& all, bool vary_first_dim) {
  const Descriptor& mine = all[0];
  for (size_t r = 1; r < all.size(); ++r) {
    if (!same(all[0], all[r], vary_first_dim)) {
      throw Error(HVD_ERR_MISMATCH, std::string(kind_name(mine.kind)) + ": ranks disagree: rank 0 called " +
                                        explain(all[0], vary_first_dim) + " but rank " + std::to_string(r) +
                                        " called " + explain(all[r], vary_first_dim) +
                                        "; every rank must call the same collectives in the same order "
                                        "with the same dtype and shape");
    }
  }
}

void check_tensor(const hvd_tensor* t, const char* what) {
  if (!t) throw Error(HVD_ERR_INVALID, std::string(what) + ": tensor is NULL");
  if (!valid_dtype(t->dtype))
    throw Error(
        HVD_ERR_INVALID,
        std::string(what) + ": unsupported dtype code " + std::to_string(t->dtype) +
            "; supported: float16, bfloat16, float32, float64, int32, int64, uint8, int8, int16, bool");
  if (t->ndim < 0 || t->ndim > HVD_MAX_DIMS)
    throw Error(HVD_ERR_INVALID, std::string(what) + ": at most " + std::to_string(HVD_MAX_DIMS) +
                                     " dimensions are supported, got " + std::to_string(t->ndim));
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] < 0) throw Error(HVD_ERR_INVALID, std::string(what) + ": negative dimension");
  if (t->device != HVD_DEVICE_CPU && t->device != HVD_DEVICE_CUDA)
    throw Error(HVD_ERR_INVALID, std::string(what) + ": unsupported device");
}

}  // namespace hvd

using namespace hvd;

extern "C" {

const char* hvd_last_error(void) { return g_last_error.c_str(); }

hvd_status hvd_init_gloo(int rank, int size, int local_rank, int local_size, const hvd_store* store,
                         const char* hostname, double timeout_s) {
  return wrap([&] {
#ifdef HVD_HAVE_GLOO
    if (g_backend) throw Error(HVD_ERR_INVALID, "already initialised; call shutdown() first");
    if (!store || size < 1 || rank < 0 || rank >= size)
      throw Error(HVD_ERR_INVALID, "init: rank " + std::to_string(rank) + " / size " + std::to_string(size) +
                                       " is not a valid pair");
    ShmSettings shm = shm_settings();
    std::unique_ptr<Backend> net = make_gloo_backend(rank, size, local_rank, local_size, *store,
                                                     hostname ? hostname : "127.0.0.1", timeout_s);
    agree_settings(*net, shm);
    g_backend = with_shared_memory(std::move(net), shm, timeout_s);
    gpu::configure(timeout_s);
#else
    (void)rank, (void)size, (void)local_rank, (void)local_size, (void)store, (void)hostname, (void)timeout_s;
    throw Error(HVD_ERR_UNAVAILABLE, std::string("this build has no gloo controller (") + variant_string() +
                                         "); start the ranks with mpiexec");
#endif
  });
}

hvd_status hvd_init_mpi(double timeout_s) {
  return wrap([&] {
#ifdef HVD_HAVE_MPI
    if (g_backend) throw Error(HVD_ERR_INVALID, "already initialised; call shutdown() first");
    ShmSettings shm = shm_settings();
    std::unique_ptr<Backend> net = make_mpi_backend(timeout_s);
    agree_settings(*net, shm);
    g_backend = with_shared_memory(std::move(net), shm, timeout_s);
    gpu::configure(timeout_s);
#else
    (void)timeout_s;
    throw Error(HVD_ERR_UNAVAILABLE, std::string("this build has no mpi controller (") + variant_string() +
                                         "); start the ranks with hvd-selector run");
#endif
  });
}

hvd_status hvd_finalize(void) {
  return wrap([&] {
    std::unique_lock<std::shared_mutex> nobody_inside(collectives_lock());  // waits for running collectives
    gpu::shutdown();
    clear_process_sets();  // sub-communicators go before the global one
    g_backend.reset();
  });
}

int hvd_initialized(void) { return g_backend ? 1 : 0; }
int hvd_rank(void) { return g_backend ? g_backend->rank() : -1; }
int hvd_size(void) { return g_backend ? g_backend->size() : -1; }
int hvd_local_rank(void) { return g_backend ? g_backend->local_rank() : -1; }
int hvd_local_size(void) { return g_backend ? g_backend->local_size() : -1; }

hvd_status hvd_barrier(void) {
  return wrap_collective([&] {
    // Allgathering the descriptors is itself a barrier: no rank's allgather
    // completes before every rank has contributed.
    agree(describe(Kind::Barrier, nullptr, -1, -1), false);
  });
}

const char* hvd_transport(void) {
  static thread_local std::string s;
  if (!g_backend) return "";
  s = g_backend->transport();
  int n = g_backend->size();
  for (int a = 0; a < n && a < 16; ++a)
    for (int b = a + 1; b < n && b < 16; ++b)
      s += (a == 0 && b == 1 ? "; " : ", ") + std::to_string(a) + "-" + std::to_string(b) + " " +
           g_backend->pair_transport(a, b);
  return s.c_str();
}

const char* hvd_build_string(void) {
  static const std::string s = std::string(variant_string()) + " kernels=" + kernels::kernel_isa();
  return s.c_str();
}

const char* hvd_library_versions(void) {
  static std::string s;
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef HVD_HAVE_MPI
    s += "mpi=" + mpi_version();
#endif
  });
  return s.c_str();
}

}  // extern "C"
