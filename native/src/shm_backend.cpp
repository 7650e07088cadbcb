// Intra-host shared-memory transport, wrapped around the network backend
// (Gloo TCP or MPI) of every controller. Ranks are grouped by host; ranks of
// one host exchange data through one anonymous shared-memory file (memfd: no
// name ever exists, so a crash cannot leave one behind), hosts through the
// wrapped backend (one leader per host). See docs/reference/transport.md for
// the protocol, the reduction order and the segment's lifetime.
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend.h"
#include "common.h"
#include "kernels_cpu.h"

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif

namespace hvd {
namespace {

constexpr uint64_t kMagic = 0x68766473686d3033ull;  // "hvdshm03"
constexpr uint64_t kProbe =
    0x70726f6265636d61ull;  // what a peer reads at init to learn that direct reads work
constexpr size_t kLine = 64;
constexpr size_t kSmall = size_t{64} << 10;  // allreduce payloads that ride in the agreement round
constexpr size_t kAlign = 64;                // allreduce shares start on a cache line
constexpr size_t kBlock = size_t{16} << 10;  // bytes reduced then copied out at a time (a multiple of kAlign)
constexpr size_t kDirectPieces = 4;          // the rule's crossover, in full slots of buffer (see Route)
constexpr size_t kDirectPartPieces = 2;      // the same for an allgather's largest part
constexpr size_t kDirectCache = size_t{256} << 10;     // the peers' blocks a direct allreduce reduces at once
constexpr size_t kChunk = size_t{32} << 10;            // a slot is filled and announced this much at a time
constexpr int kSpin = 64;                              // pause instructions before polling with sched_yield
constexpr std::chrono::milliseconds kYield{2};         // polling with sched_yield before sleeping on a futex
constexpr std::chrono::microseconds kPinnedSpin{200};  // spinning first when bound to one CPU

// One cache line per local rank: its phase counter, sleepers on it, its pid,
// how much of its slot the current exchange has filled, and where its input
// and output of the current direct collective are.
struct alignas(kLine) RankLine {
  std::atomic<uint32_t> phase;
  std::atomic<int32_t> waiters;
  int32_t pid;
  std::atomic<uint64_t> filled;  // (exchange << 32) | bytes written into the slot so far
  uint64_t in;
  uint64_t out;
};

// How a collective moves its data between the ranks of one host (the rule,
// in one place; docs/reference/transport.md, "Slots and direct reads").
//  * kSlots: in slot-sized pieces through the shared segment, one meeting of
//    all local ranks per piece (an allreduce two); the writer copies into
//    its slot, the readers copy out: two copies per byte, an allreduce three.
//  * kDirect: every rank publishes the addresses of its input and output
//    and the readers copy straight from the peer's memory into their output
//    with process_vm_readv (cross-memory attach: one copy per byte, by the
//    kernel); two meetings whatever the size (an allreduce three:
//    reduce-scatter, allgather, done).
// kDirect when every local rank could read its peers at init and the
// slots would move at least kDirectPieces full slots (4 MiB with the
// default 1 MiB slot) through the busiest rank's buffer: the allreduce or
// broadcast buffer; for an allgather, whose buffers carry one rank's part
// each, kDirectPartPieces of the largest part. The meetings decide on a busy
// host (each can cost a time slice) and the copies on an idle one: below
// these the slots' fewer meetings won at 2 and 4 ranks, from them on direct
// reads did, and a 4 MiB allgather at 4-16 ranks (parts of 1 MiB and less)
// was slower direct (benchmarks/bench_shm_pieces.py; figures in
// docs/reference/performance.md).
enum class Route { kSlots, kDirect };

struct alignas(kLine) Header {
  uint64_t magic;
  uint32_t local_size;
  uint32_t reserved;
  uint64_t slot_bytes;
  std::atomic<uint32_t> abort;  // set by a rank that gave up: the others stop waiting
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "lock-free atomics needed in shared memory");

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string read_link(const char* path) {
  char buf[128] = {0};
  ssize_t n = readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Which host a rank runs on: HVD_SELECTOR_HOST_ID when set (tests force
// "different hosts" on one machine with it), else hostname + boot id + pid
// namespace (peers find each other's memory and liveness through /proc, so
// ranks in different pid namespaces of one machine cannot share).
std::string host_identity() {
  std::string id = env("HVD_SELECTOR_HOST_ID");
  if (!id.empty()) return "id:" + id;
  char name[64] = {0};
  gethostname(name, sizeof(name) - 1);
  return std::string(name) + "/" + read_first_line("/proc/sys/kernel/random/boot_id") + "/" +
         read_link("/proc/self/ns/pid");
}

// HVD_SELECTOR_SHM_DIRECT: 0 keeps every collective on the slots, 1 follows
// the rule (see Route), `all` reads directly at every size (to measure the
// crossover, and for tests), `auto` (the default) is 1 where this host's
// cross-memory copy pays and 0 where it does not (cross_memory_copy_pays).
// The local ranks agree at init on the lowest of theirs.
constexpr int kDirectAuto = 3;
int direct_setting() {
  std::string v = env("HVD_SELECTOR_SHM_DIRECT");
  if (v.empty() || v == "auto") return kDirectAuto;
  if (v == "1") return 1;
  if (v == "0") return 0;
  if (v == "all") return 2;
  throw Error(HVD_ERR_INVALID, "HVD_SELECTOR_SHM_DIRECT=" + v + " must be 0, 1, all or auto");
}

// Whether one cross-memory copy (process_vm_readv, what a direct read is)
// beats the slots' two plain copies on this host: at most kDirectCopyRatio
// times a memcpy's time for 1 MiB (the best of 5 each, of this process's own
// memory, at init). It depends on the machine: 3.5x on a 2-core EPYC VM
// (10 GB/s against 36), where the slots won at every size and rank count
// measured, while direct reads won from 4 MiB on the 2-core zen3 this rule
// was first measured on (docs/reference/performance.md).
constexpr double kDirectCopyRatio = 1.5;
bool cross_memory_copy_pays() {
  constexpr size_t kBytes = size_t{1} << 20;
  std::vector<unsigned char> from(kBytes, 1), to(kBytes, 2);
  double plain = 1e30, cross = 1e30;
  for (int round = 0; round < 6; ++round) {  // the first round touches every page
    auto start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), kBytes);
    auto mid = std::chrono::steady_clock::now();
    iovec mine{to.data(), kBytes}, theirs{from.data(), kBytes};
    if (process_vm_readv(getpid(), &mine, 1, &theirs, 1, 0) != static_cast<ssize_t>(kBytes)) return false;
    auto end = std::chrono::steady_clock::now();
    if (round == 0) continue;
    plain = std::min(plain, std::chrono::duration<double>(mid - start).count());
    cross = std::min(cross, std::chrono::duration<double>(end - mid).count());
  }
  return cross <= kDirectCopyRatio * plain;
}

bool shm_enabled() {
  std::string v = env("HVD_SELECTOR_SHM");
  if (v.empty() || v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  throw Error(HVD_ERR_INVALID, "HVD_SELECTOR_SHM=" + v + " must be 0 or 1");
}

// HVD_SELECTOR_SHM_SLOT (bytes per buffer), rounded to pages; else `fallback`.
size_t slot_setting(size_t fallback) {
  std::string v = env("HVD_SELECTOR_SHM_SLOT");
  if (v.empty()) return fallback;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (!end || *end || n < (size_t{128} << 10) || n > (size_t{1} << 30))
    throw Error(HVD_ERR_INVALID,
                "HVD_SELECTOR_SHM_SLOT=" + v + " must be a byte count from 131072 to 1073741824");
  return static_cast<size_t>(n) & ~size_t{4095};
}

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

bool bound_to_one_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1;
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

// What the ranks learn about each other at init (exchanged over the wrapped backend).
struct Announce {
  char host[200];
  int32_t pid;
  int32_t fd;  // the leader's memfd, opened by the others as /proc/<pid>/fd/<fd>
  int32_t ok;
  int32_t direct;  // its HVD_SELECTOR_SHM_DIRECT, 0 if it could not read every local peer's probe
  uint64_t probe;  // the address of this rank's probe word (kProbe)
};

class ShmBackend : public Backend {
 public:
  ShmBackend(std::unique_ptr<Backend> inner, const ShmSettings& settings, double timeout_s)
      : inner_(std::move(inner)) {
    const size_t slot_bytes = settings.slot_bytes;
    timeout_ = std::chrono::duration<double>(timeout_s);
    const int size = inner_->size(), rank = inner_->rank();
    Announce mine{};
    std::string host = host_identity();
    std::strncpy(mine.host, host.c_str(), sizeof(mine.host) - 1);
    mine.pid = static_cast<int32_t>(getpid());
    mine.fd = -1;
    mine.probe = reinterpret_cast<uint64_t>(&probe_);
    std::vector<Announce> all(size);
    inner_->allgather(&mine, all.data(), sizeof(Announce));
    // Hosts in the order of their lowest rank; ranks within a host in rank order.
    group_of_.assign(size, -1);
    for (int r = 0; r < size; ++r) {
      if (group_of_[r] >= 0) continue;
      int g = static_cast<int>(groups_.size());
      groups_.emplace_back();
      for (int q = r; q < size; ++q)
        if (group_of_[q] < 0 && std::strncmp(all[q].host, all[r].host, sizeof(all[r].host)) == 0) {
          group_of_[q] = g;
          groups_[g].push_back(q);
        }
    }
    const auto& local = groups_[group_of_[rank]];
    local_size_ = static_cast<int>(local.size());
    local_index_ = static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
    if (groups_.size() > 1) connect_leaders();
    if (local_size_ == 1) {
      // Nothing to share on this host, but the same collectives as the others.
      inner_->allgather(&mine, all.data(), sizeof(Announce));
      inner_->allgather(&mine, all.data(), sizeof(Announce));
      inner_->barrier();
      return;
    }
    // Two buffers per local rank (double buffering: a rank fills one while
    // its peers still read the other).
    slot_bytes_ = slot_bytes;
    header_bytes_ = (sizeof(Header) + sizeof(RankLine) * local_size_ + 4095) & ~size_t{4095};
    map_bytes_ = header_bytes_ + 2 * slot_bytes_ * local_size_;
    // The host's leader creates the memory; the others open it through
    // /proc while the leader keeps the descriptor open, so it never has a
    // name in /dev/shm and goes away with the last rank that maps it.
    std::string error;
    int fd = -1;
    if (local_index_ == 0) {
      try {
        fd = create();
      } catch (const Error& exc) {
        error = exc.what();
      }
      mine.fd = fd;
    }
    mine.ok = error.empty() ? 1 : 0;
    try {
      inner_->allgather(&mine, all.data(), sizeof(Announce));
      const Announce& leader = all[local[0]];
      if (local_index_ != 0 && leader.ok) {
        try {
          attach(leader.pid, leader.fd);
        } catch (const Error& exc) {
          error = exc.what();
        }
      }
      // Everyone of the host has mapped it (or failed): the descriptor goes.
      // Each rank also tries a direct read of every local peer's probe word
      // (the peers are inside this allgather, so their probes exist).
      mine.ok = error.empty() ? 1 : 0;
      mine.direct = settings.direct != 0 && can_read_peers(local, all) ? settings.direct : 0;
      if (mine.direct == kDirectAuto) mine.direct = cross_memory_copy_pays() ? 1 : 0;
      inner_->allgather(&mine, all.data(), sizeof(Announce));
    } catch (...) {
      if (fd >= 0) close(fd);
      unmap();
      throw;
    }
    if (fd >= 0) close(fd);
    for (int r : local) {
      if (all[r].ok) continue;
      unmap();
      throw Error(HVD_ERR_INTERNAL, "shm: rank " + std::to_string(r) + " could not share memory with rank " +
                                        std::to_string(rank) + (error.empty() ? "" : " (" + error + ")") +
                                        "; set HVD_SELECTOR_SHM=0 to use the network between local ranks");
    }
    lines_ = reinterpret_cast<RankLine*>(base_ + sizeof(Header));
    lines_[local_index_].pid = mine.pid;
    for (int i = 0; i < local_size_; ++i) pids_.push_back(all[local[i]].pid);
    int direct = 2;
    for (int r : local) direct = std::min(direct, static_cast<int>(all[r].direct));
    direct_mode_ = direct;
    if (local_index_ == 0) {
      header()->slot_bytes = slot_bytes_;
      header()->local_size = static_cast<uint32_t>(local_size_);
      header()->magic = kMagic;
    }
    inner_->barrier();
    if (header()->magic != kMagic || header()->slot_bytes != slot_bytes_) {
      unmap();
      throw Error(HVD_ERR_INTERNAL, "shm: segment header mismatch");
    }
  }

  ~ShmBackend() override { unmap(); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  int local_size() const override { return inner_->local_size(); }
  std::string name() const override { return inner_->name(); }
  std::string version() const override { return inner_->version(); }

  std::string transport() const override {
    std::string net = inner_->transport();
    if (groups_.size() == 1 && local_size_ > 1) return "shm";
    std::string s = "hierarchical: shm within " + std::to_string(groups_.size()) + " hosts, " + net +
                    " between host leaders";
    return s;
  }

  std::string pair_transport(int a, int b) const override {
    if (a == b) return "self";
    if (group_of_[a] == group_of_[b] && base_) return "shm";
    return inner_->transport();
  }

  // Process sets travel over the network transport underneath.
  std::unique_ptr<Backend> subset(int id, const std::vector<int>& ranks, const hvd_store* store,
                                  const std::string& hostname, double timeout_s) override {
    return inner_->subset(id, ranks, store, hostname, timeout_s);
  }

  // On one host a small allreduce rides whole in the agreement round: one
  // exchange through the segment, then every rank reduces in rank order.
  size_t inline_limit() const override {
    return single_host() ? std::min({kSmall, (size_t{256} << 10) / local_size_, slot_bytes_ - 4096})
                         : Backend::inline_limit();
  }
  bool sized_slots() const override { return single_host(); }

  void allgather(const void* in, void* out, size_t bytes) override {
    if (!single_host()) return inner_->allgather(in, out, bytes);
    std::vector<size_t> each(local_size_, bytes);
    local_allgatherv(in, out, each);
  }

  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    if (!single_host()) return inner_->allgatherv(in, out, bytes);
    local_allgatherv(in, out, bytes);
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    if (!single_host()) return inner_->broadcast(buf, bytes, root);
    local_broadcast(buf, bytes, root);
  }

  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    inner_->alltoallv(in, send_bytes, out, recv_bytes);
  }

  void barrier() override {
    if (!single_host()) return inner_->barrier();
    arrive();
    wait_all();
  }

  // Within the host: reduce-scatter + allgather over the segment. Across
  // hosts: the host leaders allreduce the host sums among themselves (the
  // network transport's algorithm for that size and number of hosts) and
  // broadcast the result through the segment; a transport that cannot make
  // the leaders' communicator (MPI) allgathers the host sums and every rank
  // adds them in host order (see the reduction order in the docs).
  void allreduce(const void* in, void* buf, size_t count, hvd_dtype dtype, hvd_op op) override {
    if (count == 0) return;
    const size_t esize = dtype_size(dtype);
    if (base_) {
      local_allreduce(in ? in : buf, buf, count, dtype, op);
    } else if (in && in != buf) {
      std::memcpy(buf, in, count * esize);
    }
    if (groups_.size() == 1) return;
    const size_t bytes = count * esize;
    if (hierarchical_) {
      if (leaders_) leaders_->allreduce(nullptr, buf, count, dtype, op);
      if (base_) local_broadcast(buf, bytes, 0);
      return;
    }
    std::vector<size_t> each(size(), 0);
    for (const auto& g : groups_) each[g[0]] = bytes;
    if (scratch_.size() < bytes * groups_.size()) scratch_.resize(bytes * groups_.size());
    inner_->allgatherv(buf, scratch_.data(), each);
    const unsigned char* s = scratch_.data();
    kernels::reduce(dtype, op, buf, s, s + bytes, count);
    for (size_t g = 2; g < groups_.size(); ++g) kernels::reduce(dtype, op, buf, buf, s + g * bytes, count);
  }

 private:
  bool single_host() const { return base_ != nullptr && groups_.size() == 1; }

  // The host leaders' own communicator over the network transport (every
  // rank takes part in making it); hierarchical_ when every leader has one.
  void connect_leaders() {
    std::vector<int> leaders;
    for (const auto& g : groups_) leaders.push_back(g[0]);
    leaders_ = inner_->split(leaders);
    const int32_t mine = local_index_ != 0 || leaders_ != nullptr;
    std::vector<int32_t> all(size());
    inner_->allgather(&mine, all.data(), sizeof(mine));
    hierarchical_ = std::all_of(all.begin(), all.end(), [](int32_t ok) { return ok != 0; });
    if (!hierarchical_) leaders_.reset();
  }
  // The rule (see Route): `carried` is what the busiest buffer would carry
  // (the allreduce or broadcast buffer, an allgather's largest part).
  Route route(size_t carried, bool allgather) const {
    if (direct_mode_ != 1) return direct_mode_ == 2 ? Route::kDirect : Route::kSlots;
    const size_t from = (allgather ? kDirectPartPieces : kDirectPieces) * slot_bytes_;
    return carried >= from ? Route::kDirect : Route::kSlots;
  }

  bool can_read_peers(const std::vector<int>& local, const std::vector<Announce>& all) const {
    for (int r : local) {
      if (all[r].pid == static_cast<int32_t>(getpid())) continue;
      uint64_t seen = 0;
      iovec to{&seen, sizeof(seen)}, from{reinterpret_cast<void*>(all[r].probe), sizeof(seen)};
      if (process_vm_readv(all[r].pid, &to, 1, &from, 1, 0) != sizeof(seen) || seen != kProbe) return false;
    }
    return true;
  }

  std::string lost_peer(int j) const {
    return "shm: lost the peer rank " + std::to_string(groups_[group_of_[rank()]][j]) + " (process " +
           std::to_string(pids_[j]) + " is gone), which probably died";
  }

  // Copies n bytes at `remote` in local rank j's memory to `local` (cross-memory attach).
  void read_peer(int j, void* local, uint64_t remote, size_t n) {
    auto* to = static_cast<unsigned char*>(local);
    while (n > 0) {
      iovec mine{to, n}, theirs{reinterpret_cast<void*>(remote), n};
      ssize_t got = process_vm_readv(pids_[j], &mine, 1, &theirs, 1, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const int why = got < 0 ? errno : EIO;
        if (why == ESRCH || process_gone(pids_[j])) fail(HVD_ERR_PEER, lost_peer(j));
        fail(HVD_ERR_INTERNAL, "shm: reading the memory of rank " +
                                   std::to_string(groups_[group_of_[rank()]][j]) +
                                   " failed: " + std::strerror(why));
      }
      to += got;
      remote += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
  }

  void publish(const void* in, const void* out) {
    lines_[local_index_].in = reinterpret_cast<uint64_t>(in);
    lines_[local_index_].out = reinterpret_cast<uint64_t>(out);
  }

  Header* header() const { return reinterpret_cast<Header*>(base_); }
  // Local rank i's buffer of the current exchange (parity of exchange_).
  unsigned char* slot(int i) const {
    return base_ + header_bytes_ + slot_bytes_ * (2 * static_cast<size_t>(i) + (exchange_ & 1));
  }

  int create() {
    int fd = static_cast<int>(syscall(SYS_memfd_create, "hvd-selector", MFD_CLOEXEC));
    if (fd < 0) throw Error(HVD_ERR_INTERNAL, std::string("shm: memfd_create: ") + std::strerror(errno));
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(map_bytes_)) != 0) {
      std::string why = std::strerror(errno);
      close(fd);
      throw Error(HVD_ERR_INTERNAL, "shm: cannot size the shared memory: " + why);
    }
    try {
      map(fd);
    } catch (...) {
      close(fd);
      throw;
    }
    return fd;
  }

  void attach(int32_t pid, int32_t leader_fd) {
    std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(leader_fd);
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw Error(HVD_ERR_INTERNAL, "shm: cannot open " + path + ": " + std::strerror(errno));
    struct stat st{};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != map_bytes_ || (st.st_mode & 0077) != 0 ||
        st.st_uid != geteuid()) {
      close(fd);
      throw Error(HVD_ERR_INTERNAL, "shm: " + path + " has the wrong size, owner or mode");
    }
    try {
      map(fd);
    } catch (...) {
      close(fd);
      throw;
    }
    close(fd);
  }

  void unmap() {
    if (base_) munmap(base_, map_bytes_);
    base_ = nullptr;
  }

  void map(int fd) {
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw Error(HVD_ERR_INTERNAL, std::string("shm: mmap: ") + std::strerror(errno));
    base_ = static_cast<unsigned char*>(p);
  }

  // -------------------------------------------------------------- phases
  // Every local rank advances its own counter through the same phases; a
  // rank waits until every local counter reached the phase it needs.
  // Exchanges alternate between each rank's two buffers: a rank may fill
  // buffer b for exchange e once every rank arrived in exchange e-1, since
  // each rank's reads of exchange e-2 (buffer b) precede that arrival. So
  // every exchange that fills a slot starts with wait_all(), and a rank
  // arrives in an exchange only after its reads of the one before.
  void arrive() {
    ++phase_;
    RankLine& me = lines_[local_index_];
    me.phase.store(phase_, std::memory_order_seq_cst);
    if (me.waiters.load(std::memory_order_seq_cst) > 0) futex(&me.phase, FUTEX_WAKE, INT_MAX, nullptr);
  }

  [[noreturn]] void fail(hvd_status status, const std::string& why) {
    broken_ = why;
    if (base_) header()->abort.store(1, std::memory_order_seq_cst);
    throw Error(status, why);
  }

  void wait_all() {
    for (int j = 0; j < local_size_; ++j)
      if (j != local_index_) wait_for(j, phase_);
  }

  bool phase_reached(int j, uint32_t target) const {
    return static_cast<int32_t>(lines_[j].phase.load(std::memory_order_acquire) - target) >= 0;
  }

  void wait_for(int j, uint32_t target) {
    wait_until(j, [&] { return phase_reached(j, target); });
  }

  // --------------------------------------------------- filling the slots
  // A slot is filled kChunk bytes at a time, and after each chunk its
  // writer announces how far it got (RankLine::filled, tagged with the
  // exchange), so a reader copies the first chunks out while the writer
  // still copies the next ones in: the two copies of every byte overlap
  // instead of following each other (on the 2-core VMs a copy between
  // cores ran at a third of one within a core, so the wait was most of a
  // 256 KiB broadcast; docs/reference/performance.md).
  static uint64_t progress(uint64_t exchange, size_t bytes) { return (exchange << 32) | bytes; }

  void fill_slot(const unsigned char* src, size_t bytes) {
    unsigned char* to = slot(local_index_);
    std::atomic<uint64_t>& filled = lines_[local_index_].filled;
    for (size_t at = 0; at < bytes; at += kChunk) {
      const size_t n = std::min(kChunk, bytes - at);
      kernels::copy(to + at, src + at, n);
      filled.store(progress(exchange_, at + n), std::memory_order_release);
    }
  }

  // Copies `bytes` of local rank j's slot out, each chunk once j announced
  // it, or once j arrived in this exchange: a rank that disagrees about the
  // call (the agreement round) may fill less than its peers expect, and its
  // descriptor at the front is what they read then.
  void drain_slot(int j, unsigned char* dst, size_t bytes) {
    bool arrived = false;
    for (size_t at = 0; at < bytes; at += kChunk) {
      const size_t n = std::min(kChunk, bytes - at);
      auto ready = [&] {
        if (announced(j, at + n)) return true;
        arrived = phase_reached(j, phase_);
        return arrived;
      };
      if (!arrived) wait_until(j, ready);
      kernels::copy(dst + at, slot(j) + at, n);
    }
  }

  // Whether local rank j filled `bytes` of its slot in this exchange (or
  // is already in the next one: exchanges are counted modulo 2^32).
  bool announced(int j, size_t bytes) const {
    const uint64_t f = lines_[j].filled.load(std::memory_order_acquire);
    const auto ahead =
        static_cast<int32_t>(static_cast<uint32_t>(f >> 32) - static_cast<uint32_t>(exchange_));
    return ahead > 0 || (ahead == 0 && (f & 0xffffffffu) >= bytes);
  }

  // Spin briefly (a running peer answers within a microsecond), then poll
  // with sched_yield: when ranks share a core (more ranks, or other jobs,
  // than cores) the peer runs at once instead of after our time slice, and
  // on an idle core it costs one system call per poll. After kYield, sleep
  // on the peer's futex in bounded steps that check the abort flag, the
  // peer's pid and the job timeout (a peer that fills its slot arrives
  // when it is done, which wakes a reader asleep on a chunk).
  template <typename Reached>
  void wait_until(int j, Reached reached) {
    if (!broken_.empty()) throw Error(HVD_ERR_PEER, "shm: the job failed earlier (" + broken_ + ")");
    RankLine& line = lines_[j];
    for (int spin = 0; spin < kSpin; ++spin) {
      if (reached()) return;
      cpu_relax();
    }
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    // Pinned to one CPU (mpiexec binds ranks to cores): the peer can never
    // run on ours, so yielding would only hand our time to other jobs.
    while (pinned_ && clock::now() - start < kPinnedSpin) {
      for (int spin = 0; spin < kSpin; ++spin) {
        if (reached()) return;
        cpu_relax();
      }
    }
    while (clock::now() - start < kYield) {
      for (int i = 0; i < 4; ++i) {
        if (reached()) return;
        sched_yield();
      }
    }
    while (!reached()) {
      if (header()->abort.load(std::memory_order_acquire))
        fail(HVD_ERR_PEER, "shm: another rank on this host gave up (a peer died or timed out)");
      if (process_gone(pids_[j])) fail(HVD_ERR_PEER, lost_peer(j));
      if (clock::now() - start > timeout_)
        fail(HVD_ERR_TIMEOUT,
             "shm: a peer (rank " + std::to_string(groups_[group_of_[rank()]][j]) +
                 ") did not respond in time; raise HVD_SELECTOR_TIMEOUT if ranks are just slow");
      uint32_t seen = line.phase.load(std::memory_order_acquire);
      if (reached()) return;
      line.waiters.fetch_add(1, std::memory_order_seq_cst);
      timespec ts{0, 10 * 1000 * 1000};
      futex(&line.phase, FUTEX_WAIT, seen, &ts);
      line.waiters.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // -------------------------------------------------------------- ops
  // One exchange per slot-sized piece: once everyone is done with the
  // exchange before, everyone fills its slot with its piece, arrives, and
  // copies the others' pieces out as they are filled.
  void local_allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) {
    size_t most = *std::max_element(bytes.begin(), bytes.end());
    std::vector<size_t> offset(local_size_ + 1, 0);
    for (int i = 0; i < local_size_; ++i) offset[i + 1] = offset[i] + bytes[i];
    const auto* src = static_cast<const unsigned char*>(in);
    auto* dst = static_cast<unsigned char*>(out);
    if (bytes[local_index_] && dst + offset[local_index_] != src)
      std::memmove(dst + offset[local_index_], src, bytes[local_index_]);
    src = dst + offset[local_index_];
    if (route(most, true) == Route::kDirect) {
      // Everyone reads the others' parts from their outputs, starting with
      // the next rank (so the readers spread over the writers), then waits
      // until nobody reads its output any more.
      publish(dst, dst);
      arrive();
      wait_all();
      for (int k = 1; k < local_size_; ++k) {
        const int i = (local_index_ + k) % local_size_;
        if (bytes[i]) read_peer(i, dst + offset[i], lines_[i].out + offset[i], bytes[i]);
      }
      arrive();
      wait_all();
      return;
    }
    for (size_t done = 0; done < most || done == 0; done += slot_bytes_) {
      size_t mine = bytes[local_index_] > done ? std::min(slot_bytes_, bytes[local_index_] - done) : 0;
      wait_all();
      fill_slot(src + done, mine);
      arrive();
      // from the next rank on, so the readers spread over the writers
      for (int k = 1; k < local_size_; ++k) {
        const int i = (local_index_ + k) % local_size_;
        size_t n = bytes[i] > done ? std::min(slot_bytes_, bytes[i] - done) : 0;
        if (n) drain_slot(i, dst + offset[i] + done, n);
      }
      ++exchange_;
      if (most == 0) break;
    }
  }

  void local_broadcast(void* buf, size_t bytes, int root) {
    auto* p = static_cast<unsigned char*>(buf);
    if (route(bytes, false) == Route::kDirect) {
      // The readers wait for the root only; the root waits until all have read.
      if (local_index_ == root) {
        publish(p, p);
        arrive();
        arrive();
        wait_all();
      } else {
        arrive();
        wait_for(root, phase_);
        read_peer(root, p, lines_[root].out, bytes);
        arrive();
      }
      return;
    }
    for (size_t done = 0; done < bytes; done += slot_bytes_) {
      size_t n = std::min(slot_bytes_, bytes - done);
      if (local_index_ == root) {
        wait_all();
        fill_slot(p + done, n);
        arrive();
      } else {
        arrive();
        drain_slot(root, p + done, n);
      }
      ++exchange_;
    }
  }

  // Byte offset of local rank i's share in a chunk of n elements.
  size_t share_begin(size_t n, size_t esize, int i) const {
    if (i >= local_size_) return n * esize;
    return std::min(n * esize, (n * static_cast<size_t>(i) / local_size_ * esize) & ~(kAlign - 1));
  }

  // Reduce-scatter + allgather, one exchange per slot-sized chunk: every
  // rank copies the others' shares of its chunk into its buffer; rank i
  // reduces share i over the local ranks in rank order (its own values
  // straight from its input) into its buffer with the target's vector
  // kernels and copies the result to its output; then everyone copies the
  // other shares out. Two phases per chunk; the next chunk goes to the other
  // buffer, so nobody waits for the slowest reader before writing.
  void local_allreduce(const void* in, void* out, size_t count, hvd_dtype dtype, hvd_op op) {
    const size_t esize = dtype_size(dtype);
    if (route(count * esize, false) == Route::kDirect) return direct_allreduce(in, out, count, dtype, op);
    const size_t per_chunk = slot_bytes_ / esize;
    const auto* src = static_cast<const unsigned char*>(in);
    auto* dst = static_cast<unsigned char*>(out);
    const int me = local_index_;
    std::vector<const unsigned char*> part(local_size_);
    for (size_t first = 0; first < count; first += per_chunk) {
      const size_t n = std::min(per_chunk, count - first);
      const unsigned char* from = src + first * esize;
      unsigned char* to = dst + first * esize;
      const size_t begin = share_begin(n, esize, me), end = share_begin(n, esize, me + 1);
      unsigned char* mine = slot(me);
      wait_all();                        // the exchange before may have left a reader in this slot
      kernels::copy(mine, from, begin);  // the shares before mine, then those after
      kernels::copy(mine + end, from + end, n * esize - end);
      arrive();
      wait_all();
      // In L1-sized blocks, so the copy to the output reads what the kernel just wrote.
      for (size_t at = begin; at < end; at += kBlock) {
        const size_t bytes = std::min(kBlock, end - at);
        const size_t m = bytes / esize;
        for (int j = 0; j < local_size_; ++j) part[j] = j == me ? from + at : slot(j) + at;
        kernels::reduce(dtype, op, mine + at, part[0], part[1], m);
        for (int j = 2; j < local_size_; ++j) kernels::reduce(dtype, op, mine + at, mine + at, part[j], m);
        kernels::copy(to + at, mine + at, bytes);
      }
      arrive();
      wait_all();
      for (int j = 0; j < local_size_; ++j) {
        if (j == me) continue;
        size_t b = share_begin(n, esize, j), e = share_begin(n, esize, j + 1);
        if (e > b) kernels::copy(to + b, slot(j) + b, e - b);
      }
      ++exchange_;
    }
  }

  // Reduce-scatter + allgather with direct reads, three meetings: rank i
  // reads share i of every peer's input in blocks (all of them together fit
  // in kDirectCache) and reduces them in rank order straight into its
  // output, the same order and kernels as the slots; then everyone reads
  // the other shares from their owners' outputs. In place (in == out) the
  // rank's own block is copied aside first, since the running sum
  // overwrites it.
  void direct_allreduce(const void* in, void* out, size_t count, hvd_dtype dtype, hvd_op op) {
    const size_t esize = dtype_size(dtype);
    const auto* src = static_cast<const unsigned char*>(in);
    auto* dst = static_cast<unsigned char*>(out);
    const int me = local_index_;
    const size_t block = std::max(kAlign, (kDirectCache / static_cast<size_t>(local_size_)) & ~(kAlign - 1));
    if (scratch_.size() < block * local_size_) scratch_.resize(block * local_size_);
    publish(src, dst);
    arrive();
    wait_all();
    std::vector<const unsigned char*> part(local_size_);
    const size_t begin = share_begin(count, esize, me), end = share_begin(count, esize, me + 1);
    for (size_t at = begin; at < end; at += block) {
      const size_t bytes = std::min(block, end - at);
      for (int j = 0; j < local_size_; ++j) {
        unsigned char* aside = scratch_.data() + block * static_cast<size_t>(j);
        if (j != me) {
          read_peer(j, aside, lines_[j].in + at, bytes);
          part[j] = aside;
        } else if (src == dst) {
          kernels::copy(aside, src + at, bytes);
          part[j] = aside;
        } else {
          part[j] = src + at;
        }
      }
      const size_t m = bytes / esize;
      kernels::reduce(dtype, op, dst + at, part[0], part[1], m);
      for (int j = 2; j < local_size_; ++j) kernels::reduce(dtype, op, dst + at, dst + at, part[j], m);
    }
    arrive();
    wait_all();
    for (int k = 1; k < local_size_; ++k) {
      const int j = (me + k) % local_size_;
      const size_t b = share_begin(count, esize, j), e = share_begin(count, esize, j + 1);
      if (e > b) read_peer(j, dst + b, lines_[j].out + b, e - b);
    }
    arrive();
    wait_all();
  }

  std::unique_ptr<Backend> inner_;
  std::unique_ptr<Backend> leaders_;  // host leaders only, across hosts
  bool hierarchical_ = false;
  std::chrono::duration<double> timeout_;
  std::vector<int> group_of_;
  std::vector<std::vector<int>> groups_;
  int local_size_ = 1, local_index_ = 0;
  size_t slot_bytes_ = 0, header_bytes_ = 0, map_bytes_ = 0;
  unsigned char* base_ = nullptr;
  RankLine* lines_ = nullptr;
  std::vector<int32_t> pids_;
  uint32_t phase_ = 0;
  bool pinned_ = bound_to_one_cpu();
  int direct_mode_ = 0;  // HVD_SELECTOR_SHM_DIRECT agreed by the host: 0 slots, 1 the rule, 2 always
  const uint64_t probe_ = kProbe;
  uint64_t exchange_ = 0;
  std::string broken_;
  std::vector<unsigned char> scratch_;
};

}  // namespace

ShmSettings shm_settings() {
  ShmSettings s;
  try {
    s.enabled = shm_enabled();
    s.slot_bytes = slot_setting(s.slot_bytes);
    s.direct = direct_setting();
  } catch (const Error& exc) {
    s.error = exc.what();
  }
  return s;
}

std::unique_ptr<Backend> with_shared_memory(std::unique_ptr<Backend> inner, const ShmSettings& settings,
                                            double timeout_s) {
  if (!settings.error.empty()) throw Error(HVD_ERR_INVALID, settings.error);
  if (!settings.enabled || inner->size() == 1) return inner;
  return std::make_unique<ShmBackend>(std::move(inner), settings, timeout_s);
}

}  // namespace hvd
