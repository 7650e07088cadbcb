// Intra-host shared-memory transport, wrapped around the network backend
// (Gloo TCP or MPI) of every controller. Ranks are grouped by host; ranks of
// one host exchange data through one POSIX shared-memory segment, hosts
// through the wrapped backend (one leader per host). See
// docs/reference/native.md "Transports" for the reduction order and the
// segment's lifetime.
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

namespace hvd {
namespace {

constexpr uint64_t kMagic = 0x68766473686d3031ull;  // "hvdshm01"
constexpr size_t kLine = 64;
constexpr size_t kSmall = size_t{64} << 10;  // allreduce payloads that ride in the agreement round

// One cache line per local rank: its phase counter, sleepers on it, its pid.
struct alignas(kLine) RankLine {
  std::atomic<uint32_t> phase;
  std::atomic<int32_t> waiters;
  int32_t pid;
};

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

// Which host a rank runs on: HVD_SELECTOR_HOST_ID when set (tests force
// "different hosts" on one machine with it), else hostname + boot id.
std::string host_identity() {
  std::string id = env("HVD_SELECTOR_HOST_ID");
  if (!id.empty()) return "id:" + id;
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return std::string(name) + "/" + read_first_line("/proc/sys/kernel/random/boot_id");
}

std::string random_hex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, raw.data(), bytes) != static_cast<ssize_t>(bytes)) {
    if (fd >= 0) close(fd);
    throw Error(HVD_ERR_INTERNAL, "shm: cannot read /dev/urandom for a segment name");
  }
  close(fd);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : raw) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

bool shm_enabled() {
  std::string v = env("HVD_SELECTOR_SHM");
  if (v.empty() || v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  throw Error(HVD_ERR_INVALID, "HVD_SELECTOR_SHM=" + v + " must be 0 or 1");
}

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A dead rank: no such process, or a zombie its launcher has not reaped yet.
bool gone(int32_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::string stat = read_first_line(("/proc/" + std::to_string(pid) + "/stat").c_str());
  auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() &&
         (stat[close_paren + 2] == 'Z' || stat[close_paren + 2] == 'X');
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

// What the ranks learn about each other at init (exchanged over the wrapped backend).
struct Announce {
  char host[200];
  char segment[48];
  int32_t pid;
  int32_t ok;
};

class ShmBackend : public Backend {
 public:
  ShmBackend(std::unique_ptr<Backend> inner, double timeout_s) : inner_(std::move(inner)) {
    timeout_ = std::chrono::duration<double>(timeout_s);
    const int size = inner_->size(), rank = inner_->rank();
    Announce mine{};
    std::string host = host_identity();
    std::strncpy(mine.host, host.c_str(), sizeof(mine.host) - 1);
    mine.pid = static_cast<int32_t>(getpid());
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
    if (local_size_ == 1) {
      // Nothing to share on this host, but the same collectives as the others.
      inner_->allgather(&mine, all.data(), sizeof(Announce));
      inner_->allgather(&mine, all.data(), sizeof(Announce));
      inner_->barrier();
      return;
    }
    // The host's leader creates the segment under a fresh random name, mode 0600.
    size_t slot = std::clamp<size_t>((size_t{64} << 20) / local_size_, size_t{1} << 20, size_t{8} << 20);
    std::string value = env("HVD_SELECTOR_SHM_SLOT");
    if (!value.empty())
      slot = std::max<size_t>(4096, std::strtoull(value.c_str(), nullptr, 10)) & ~size_t{4095};
    slot_bytes_ = slot;
    header_bytes_ = (sizeof(Header) + sizeof(RankLine) * local_size_ + 4095) & ~size_t{4095};
    map_bytes_ = header_bytes_ + slot_bytes_ * local_size_;
    std::string error;
    std::string name;
    if (local_index_ == 0) {
      name = "/hvdsel-" + random_hex(16);
      try {
        create(name);
      } catch (const Error& exc) {
        error = exc.what();
        name.clear();
      }
      std::strncpy(mine.segment, name.c_str(), sizeof(mine.segment) - 1);
    }
    mine.ok = error.empty() ? 1 : 0;
    inner_->allgather(&mine, all.data(), sizeof(Announce));
    const Announce& leader = all[local[0]];
    if (local_index_ != 0 && leader.ok) {
      try {
        attach(leader.segment);
      } catch (const Error& exc) {
        error = exc.what();
      }
    }
    // Everyone of the host has mapped it (or failed): the name goes now, so
    // nothing is left in /dev/shm whatever happens to the job later.
    mine.ok = error.empty() ? 1 : 0;
    inner_->allgather(&mine, all.data(), sizeof(Announce));
    if (local_index_ == 0 && !name.empty()) shm_unlink(name.c_str());
    for (int r : local)
      if (!all[r].ok)
        throw Error(HVD_ERR_INTERNAL, "shm: rank " + std::to_string(r) +
                                          " could not share memory with rank " + std::to_string(rank) +
                                          (error.empty() ? "" : " (" + error + ")") +
                                          "; set HVD_SELECTOR_SHM=0 to use the network between local ranks");
    lines_ = reinterpret_cast<RankLine*>(base_ + sizeof(Header));
    lines_[local_index_].pid = mine.pid;
    for (int i = 0; i < local_size_; ++i) pids_.push_back(all[local[i]].pid);
    if (local_index_ == 0) {
      header()->slot_bytes = slot_bytes_;
      header()->local_size = static_cast<uint32_t>(local_size_);
      header()->magic = kMagic;
    }
    inner_->barrier();
    if (header()->magic != kMagic || header()->slot_bytes != slot_bytes_)
      throw Error(HVD_ERR_INTERNAL, "shm: segment header mismatch");
  }

  ~ShmBackend() override {
    if (base_) munmap(base_, map_bytes_);
  }

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

  // On one host a small allreduce rides whole in the agreement round: one
  // exchange through the segment, then every rank reduces in rank order.
  // Process sets travel over the network transport underneath.
  std::unique_ptr<Backend> subset(int id, const std::vector<int>& ranks, const hvd_store* store,
                                  const std::string& hostname, double timeout_s) override {
    return inner_->subset(id, ranks, store, hostname, timeout_s);
  }

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
    ready();
    arrive();
    wait_all();
  }

  // Within the host: reduce-scatter + allgather over the segment. Across
  // hosts: the leaders' partial sums travel over the wrapped backend and
  // every rank adds them in host order (see the reduction order in the docs).
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
  Header* header() const { return reinterpret_cast<Header*>(base_); }
  unsigned char* slot(int i) const { return base_ + header_bytes_ + slot_bytes_ * static_cast<size_t>(i); }

  void create(const std::string& name) {
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) throw Error(HVD_ERR_INTERNAL, "shm: cannot create " + name + ": " + std::strerror(errno));
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(map_bytes_)) != 0) {
      std::string why = std::strerror(errno);
      close(fd);
      shm_unlink(name.c_str());
      throw Error(HVD_ERR_INTERNAL, "shm: cannot size " + name + ": " + why);
    }
    map(fd, name);
  }

  void attach(const std::string& name) {
    if (name.rfind("/hvdsel-", 0) != 0)
      throw Error(HVD_ERR_INTERNAL, "shm: bad segment name from the leader");
    int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) throw Error(HVD_ERR_INTERNAL, "shm: cannot open " + name + ": " + std::strerror(errno));
    struct stat st{};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != map_bytes_ || (st.st_mode & 0077) != 0 ||
        st.st_uid != geteuid()) {
      close(fd);
      throw Error(HVD_ERR_INTERNAL, "shm: segment " + name + " has the wrong size, owner or mode");
    }
    map(fd, name);
  }

  void map(int fd, const std::string& name) {
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      if (local_index_ == 0) shm_unlink(name.c_str());
      throw Error(HVD_ERR_INTERNAL, "shm: cannot map " + name + ": " + std::strerror(errno));
    }
    base_ = static_cast<unsigned char*>(p);
  }

  // -------------------------------------------------------------- phases
  // Every local rank advances its own counter through the same phases; a
  // rank waits until every local counter reached the phase it needs.
  void arrive() {
    ++phase_;
    RankLine& me = lines_[local_index_];
    me.phase.store(phase_, std::memory_order_seq_cst);
    if (me.waiters.load(std::memory_order_seq_cst) > 0) futex(&me.phase, FUTEX_WAKE, INT_MAX, nullptr);
  }

  // Before writing into its slot: every rank finished reading the last op.
  void ready() { wait_all(); }

  [[noreturn]] void fail(hvd_status status, const std::string& why) {
    broken_ = why;
    if (base_) header()->abort.store(1, std::memory_order_seq_cst);
    throw Error(status, why);
  }

  void wait_all() {
    if (!broken_.empty()) throw Error(HVD_ERR_PEER, "shm: the job failed earlier (" + broken_ + ")");
    for (int j = 0; j < local_size_; ++j) wait_for(j, phase_);
  }

  void wait_for(int j, uint32_t target) {
    RankLine& line = lines_[j];
    auto reached = [&] {
      return static_cast<int32_t>(line.phase.load(std::memory_order_acquire) - target) >= 0;
    };
    for (int spin = 0; spin < 2000; ++spin) {
      if (reached()) return;
      cpu_relax();
    }
    for (int spin = 0; spin < 20; ++spin) {
      if (reached()) return;
      sched_yield();
    }
    auto start = std::chrono::steady_clock::now();
    while (!reached()) {
      if (header()->abort.load(std::memory_order_acquire))
        fail(HVD_ERR_PEER, "shm: another rank on this host gave up (a peer died or timed out)");
      if (gone(pids_[j]))
        fail(HVD_ERR_PEER, "shm: lost the peer rank " + std::to_string(groups_[group_of_[rank()]][j]) +
                               " (process " + std::to_string(pids_[j]) + " is gone), which probably died");
      if (std::chrono::steady_clock::now() - start > timeout_)
        fail(HVD_ERR_TIMEOUT,
             "shm: a peer (rank " + std::to_string(groups_[group_of_[rank()]][j]) +
                 ") did not respond in time; raise HVD_SELECTOR_TIMEOUT if ranks are just slow");
      uint32_t seen = line.phase.load(std::memory_order_acquire);
      if (static_cast<int32_t>(seen - target) >= 0) return;
      line.waiters.fetch_add(1, std::memory_order_seq_cst);
      timespec ts{0, 20 * 1000 * 1000};
      futex(&line.phase, FUTEX_WAIT, seen, &ts);
      line.waiters.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // -------------------------------------------------------------- ops
  void local_allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) {
    size_t most = *std::max_element(bytes.begin(), bytes.end());
    std::vector<size_t> offset(local_size_ + 1, 0);
    for (int i = 0; i < local_size_; ++i) offset[i + 1] = offset[i] + bytes[i];
    const auto* src = static_cast<const unsigned char*>(in);
    auto* dst = static_cast<unsigned char*>(out);
    for (size_t done = 0; done < most || done == 0; done += slot_bytes_) {
      ready();
      size_t mine = bytes[local_index_] > done ? std::min(slot_bytes_, bytes[local_index_] - done) : 0;
      if (mine) std::memcpy(slot(local_index_), src + done, mine);
      arrive();
      wait_all();
      for (int i = 0; i < local_size_; ++i) {
        size_t n = bytes[i] > done ? std::min(slot_bytes_, bytes[i] - done) : 0;
        if (n) std::memcpy(dst + offset[i] + done, slot(i), n);
      }
      arrive();
      if (most == 0) break;
    }
  }

  void local_broadcast(void* buf, size_t bytes, int root) {
    auto* p = static_cast<unsigned char*>(buf);
    for (size_t done = 0; done < bytes; done += slot_bytes_) {
      size_t n = std::min(slot_bytes_, bytes - done);
      ready();
      if (local_index_ == root) std::memcpy(slot(root), p + done, n);
      arrive();
      if (local_index_ != root) {
        wait_for(root, phase_);
        std::memcpy(p + done, slot(root), n);
      }
      arrive();
    }
  }

  // Each rank owns one share of every chunk: it sums that share over the
  // local ranks in rank order into its output, publishes it, and everyone
  // copies the other shares out.
  void local_allreduce(const void* in, void* out, size_t count, hvd_dtype dtype, hvd_op op) {
    const size_t esize = dtype_size(dtype);
    const size_t per_chunk = slot_bytes_ / esize;
    const auto* src = static_cast<const unsigned char*>(in);
    auto* dst = static_cast<unsigned char*>(out);
    const size_t L = static_cast<size_t>(local_size_);
    for (size_t first = 0; first < count; first += per_chunk) {
      size_t n = std::min(per_chunk, count - first);
      ready();
      std::memcpy(slot(local_index_), src + first * esize, n * esize);
      arrive();
      wait_all();
      size_t begin = n * local_index_ / L, end = n * (local_index_ + 1) / L;
      unsigned char* mine = dst + (first + begin) * esize;
      if (end > begin) {
        size_t off = begin * esize;
        kernels::reduce(dtype, op, mine, slot(0) + off, slot(1) + off, end - begin);
        for (int i = 2; i < local_size_; ++i)
          kernels::reduce(dtype, op, mine, mine, slot(i) + off, end - begin);
        std::memcpy(slot(local_index_) + off, mine, (end - begin) * esize);
      }
      arrive();
      wait_all();
      for (int i = 0; i < local_size_; ++i) {
        if (i == local_index_) continue;
        size_t b = n * i / L, e = n * (i + 1) / L;
        if (e > b) std::memcpy(dst + (first + b) * esize, slot(i) + b * esize, (e - b) * esize);
      }
      arrive();
    }
  }

  std::unique_ptr<Backend> inner_;
  std::chrono::duration<double> timeout_;
  std::vector<int> group_of_;
  std::vector<std::vector<int>> groups_;
  int local_size_ = 1, local_index_ = 0;
  size_t slot_bytes_ = 0, header_bytes_ = 0, map_bytes_ = 0;
  unsigned char* base_ = nullptr;
  RankLine* lines_ = nullptr;
  std::vector<int32_t> pids_;
  uint32_t phase_ = 0;
  std::string broken_;
  std::vector<unsigned char> scratch_;
};

}  // namespace

std::unique_ptr<Backend> with_shared_memory(std::unique_ptr<Backend> inner, double timeout_s) {
  if (!shm_enabled() || inner->size() == 1) return inner;
  return std::make_unique<ShmBackend>(std::move(inner), timeout_s);
}

}  // namespace hvd
