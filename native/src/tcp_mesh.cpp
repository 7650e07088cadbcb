// The authenticated TCP mesh (protocol in tcp_mesh.h).
#include "tcp_mesh.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "common.h"
#include "tcp_auth.h"

namespace hvd {
namespace tcp {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kHello[8] = {'h', 'v', 'd', 't', 'c', 'p', '1', '\n'};
constexpr char kAck[8] = {'h', 'v', 'd', 't', 'c', 'p', 'o', 'k'};
constexpr size_t kServerHello = sizeof(kHello) + kChallengeBytes;
constexpr size_t kClientProof = sizeof(kHello) + 4 + 4 + kChallengeBytes + kMacBytes;

int64_t ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? left : 0;
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// ------------------------------------------------------------------ store
void store_set(const hvd_store& store, const std::string& key, const std::string& value) {
  char error[256] = {0};
  if (store.set(store.ctx, key.c_str(), value.data(), value.size(), error) != 0)
    throw Error(HVD_ERR_TIMEOUT, std::string("rendezvous: ") + error);
}

std::string store_get(const hvd_store& store, const std::string& key, Clock::time_point deadline) {
  char error[256] = {0};
  void* value = nullptr;
  size_t len = 0;
  if (store.get(store.ctx, key.c_str(), &value, &len, std::max<int64_t>(ms_left(deadline), 1), error) != 0)
    throw Error(HVD_ERR_TIMEOUT, std::string("rendezvous: ") + error);
  std::string out(static_cast<char*>(value), len);
  std::free(value);
  return out;
}

// Every rank's value under `prefix` (this rank's set to `value`), in rank order, in one round trip.
std::vector<std::string> store_gather(const hvd_store& store, const std::string& prefix, int rank, int size,
                                      const std::string& value, Clock::time_point deadline) {
  char error[256] = {0};
  void* table = nullptr;
  size_t len = 0;
  if (store.gather(store.ctx, prefix.c_str(), rank, size, value.data(), value.size(), &table, &len,
                   std::max<int64_t>(ms_left(deadline), 1), error) != 0)
    throw Error(HVD_ERR_TIMEOUT, std::string("rendezvous: ") + error);
  std::unique_ptr<void, decltype(&std::free)> owned(table, &std::free);
  const auto* p = static_cast<const unsigned char*>(table);
  std::vector<std::string> out;
  size_t at = 0;
  while (static_cast<int>(out.size()) < size && at + 4 <= len) {
    size_t n =
        (size_t{p[at]} << 24) | (size_t{p[at + 1]} << 16) | (size_t{p[at + 2]} << 8) | size_t{p[at + 3]};
    if (at + 4 + n > len) break;
    out.emplace_back(reinterpret_cast<const char*>(p + at + 4), n);
    at += 4 + n;
  }
  if (static_cast<int>(out.size()) != size || at != len)
    throw Error(HVD_ERR_INTERNAL, "rendezvous: the store's gather under '" + prefix + "' is malformed");
  return out;
}

// ------------------------------------------------------------------ sockets
void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

Endpoint resolve(const std::string& host, const std::string& port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : (AI_NUMERICHOST | AI_NUMERICSERV);
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res)
    throw Error(HVD_ERR_INVALID, "init: cannot resolve the data address '" + host + "': " + gai_strerror(rc));
  Endpoint ep;
  std::memcpy(&ep.addr, res->ai_addr, res->ai_addrlen);
  ep.len = static_cast<socklen_t>(res->ai_addrlen);
  freeaddrinfo(res);
  return ep;
}

std::string numeric(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    throw Error(HVD_ERR_INTERNAL, "init: getnameinfo failed on the data listener");
  return std::string(host) + " " + port;
}

// Waits for `events` on fd until the deadline; false on timeout or error.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms_left(deadline), 1000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
    if (Clock::now() >= deadline) return false;
  }
}

// Exactly n bytes (never more: what follows belongs to Gloo), or an error text.
std::string read_exact(int fd, void* buf, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    ssize_t got = ::recv(fd, p, n, 0);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
    } else if (got == 0) {
      return "the peer closed the connection during the handshake";
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_fd(fd, POLLIN, deadline)) return "the handshake timed out";
    } else {
      return std::string("recv: ") + std::strerror(errno);
    }
  }
  return "";
}

std::string write_all(int fd, const void* buf, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<const unsigned char*>(buf);
  while (n > 0) {
    ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
    if (put > 0) {
      p += put;
      n -= static_cast<size_t>(put);
    } else if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline)) return "the handshake timed out";
    } else {
      return std::string("send: ") + std::strerror(errno);
    }
  }
  return "";
}

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (24 - 8 * i));
}

uint32_t get_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// ------------------------------------------------------------------ listening side
class Listener {
 public:
  // `rv`'s key and nonce are read only once run() starts (the nonce may
  // arrive with the addresses, after the listener is bound).
  Listener(const MeshOptions& o, const std::vector<char>& wanted, const Rendezvous& rv)
      : o_(o), rv_(rv), peers_(o.size, -1), wanted_(wanted) {
    Endpoint ep = resolve(o.hostname, "0", true);
    fd_ = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw Error(HVD_ERR_INTERNAL, std::string("init: socket: ") + std::strerror(errno));
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len) != 0 ||
        ::listen(fd_, o.backlog) != 0) {
      std::string why = std::strerror(errno);
      close_fd(fd_);
      throw Error(HVD_ERR_INVALID,
                  "init: cannot listen on the data address '" + o.hostname + "': " + why +
                      "; set HVD_SELECTOR_HOSTNAME or HVD_SELECTOR_IFACE to a local address");
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    address_ = numeric(bound, len);
  }

  ~Listener() {
    close_fd(fd_);
    for (auto& p : pending_) close_fd(p.fd);
    for (int& fd : peers_) close_fd(fd);
  }

  const std::string& address() const { return address_; }

  // Serves the listener until every higher rank proved itself, the
  // deadline passes (error() says who is missing) or `stop` is set.
  void run(Clock::time_point deadline, const std::atomic<bool>& stop) {
    try {
      serve(deadline, stop);
    } catch (const std::exception& exc) {
      error_ = exc.what();
    }
    close_fd(fd_);
    for (auto& p : pending_) close_fd(p.fd);
    pending_.clear();
  }

  const std::string& error() const { return error_; }

  // The proven connections by rank (ownership passes to the caller).
  std::vector<int> take() {
    std::vector<int> out = peers_;
    std::fill(peers_.begin(), peers_.end(), -1);
    return out;
  }

 private:
  struct Pending {
    int fd = -1;
    Clock::time_point started, deadline;
    Challenge server_challenge{};
    Challenge client_challenge{};
    int client = -1;
    bool proven = false;
    unsigned char in[kClientProof] = {0};
    size_t have = 0, need = kClientProof;
    std::string out;
    size_t sent = 0;
  };

  int missing() const {
    int n = 0;
    for (int q = o_.rank + 1; q < o_.size; ++q) n += wanted_[q] && peers_[q] < 0;
    return n;
  }

  void serve(Clock::time_point deadline, const std::atomic<bool>& stop) {
    std::vector<pollfd> fds;
    while (missing() > 0) {
      if (stop.load()) return;
      auto now = Clock::now();
      if (now >= deadline) {
        std::string who;
        for (int q = o_.rank + 1; q < o_.size; ++q)
          if (wanted_[q] && peers_[q] < 0) who += (who.empty() ? "" : ", ") + std::to_string(q);
        error_ = "init: rank(s) " + who + " did not connect to rank " + std::to_string(o_.rank) +
                 "'s data listener and prove the job secret in time (" + std::to_string(refused_) +
                 " other connection(s) were refused); a rank may have died or be slow to start - raise "
                 "HVD_SELECTOR_TIMEOUT if ranks are just slow";
        return;
      }
      for (auto& p : pending_)
        if (now >= p.deadline) drop(p);
      sweep();
      fds.clear();
      fds.push_back({fd_, POLLIN, 0});
      auto wake = std::min(deadline, now + milliseconds(100));
      for (auto& p : pending_) {
        fds.push_back({p.fd, static_cast<short>(POLLIN | (p.sent < p.out.size() ? POLLOUT : 0)), 0});
        wake = std::min(wake, p.deadline);
      }
      int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms_left(wake), 1)));
      if (rc < 0 && errno != EINTR)
        throw Error(HVD_ERR_INTERNAL, std::string("init: poll: ") + std::strerror(errno));
      if (rc <= 0) continue;
      // Pending first (fds[i + 1] is pending_[i]), then new connections.
      for (size_t i = 0; i < pending_.size(); ++i)
        if (fds[i + 1].revents) step(pending_[i], fds[i + 1].revents);
      sweep();
      if (fds[0].revents & POLLIN) accept_all();
    }
  }

  void accept_all() {
    for (int i = 0; i < 64; ++i) {
      int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {
          if (!evict_oldest()) return;  // out of descriptors: make room and try again
          sweep();
          continue;
        }
        return;  // EAGAIN, or an aborted connection
      }
      if (pending_.size() >= o_.max_pending && evict_oldest()) sweep();
      Pending p;
      p.fd = fd;
      p.started = Clock::now();
      p.deadline = std::min(after(o_.handshake_s), after(o_.timeout_s));
      random_bytes(p.server_challenge.data(), p.server_challenge.size());
      p.out.assign(kHello, sizeof(kHello));
      p.out.append(reinterpret_cast<const char*>(p.server_challenge.data()), p.server_challenge.size());
      pending_.push_back(std::move(p));
      step(pending_.back(), POLLOUT);
    }
  }

  // Closes the oldest connection that has not proven itself yet.
  bool evict_oldest() {
    Pending* oldest = nullptr;
    for (auto& p : pending_)
      if (p.fd >= 0 && !p.proven && (!oldest || p.started < oldest->started)) oldest = &p;
    if (!oldest) return false;
    drop(*oldest);
    return true;
  }

  void drop(Pending& p) {
    if (p.fd < 0) return;
    close_fd(p.fd);
    if (!p.proven) ++refused_;
  }

  void sweep() {
    pending_.erase(
        std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.fd < 0; }),
        pending_.end());
  }

  void step(Pending& p, short revents) {
    if (p.fd < 0) return;
    while (p.sent < p.out.size()) {
      ssize_t put = ::send(p.fd, p.out.data() + p.sent, p.out.size() - p.sent, MSG_NOSIGNAL);
      if (put > 0) {
        p.sent += static_cast<size_t>(put);
      } else if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        break;
      } else {
        return drop(p);
      }
    }
    if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
    ssize_t got = ::recv(p.fd, p.in + p.have, p.need - p.have, 0);
    if (got == 0) return drop(p);
    if (got < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) drop(p);
      return;
    }
    p.have += static_cast<size_t>(got);
    if (!p.proven && p.have >= sizeof(kHello) && std::memcmp(p.in, kHello, sizeof(kHello)) != 0)
      return drop(p);  // not our protocol: garbage goes at once
    if (p.have < p.need) return;
    if (!p.proven) return check_proof(p);
    if (std::memcmp(p.in, kAck, sizeof(kAck)) != 0 || peers_[p.client] >= 0) return drop(p);
    peers_[p.client] = p.fd;  // proven and acknowledged: this is rank p.client
    p.fd = -1;
  }

  void check_proof(Pending& p) {
    const unsigned char* in = p.in + sizeof(kHello);
    uint32_t client = get_u32(in), server = get_u32(in + 4);
    std::memcpy(p.client_challenge.data(), in + 8, kChallengeBytes);
    const unsigned char* mac = in + 8 + kChallengeBytes;
    bool expected = server == static_cast<uint32_t>(o_.rank) && client > server &&
                    client < static_cast<uint32_t>(o_.size) && wanted_[client] && peers_[client] < 0;
    if (!expected) return drop(p);
    Mac want = client_proof(rv_.key, rv_.nonce, static_cast<int>(client), o_.rank, p.server_challenge,
                            p.client_challenge);
    if (!same_mac(mac, want.data())) return drop(p);
    // The client knows the secret; answer with ours and wait for its ack as
    // long as the mesh may take (it is the real peer).
    p.proven = true;
    p.client = static_cast<int>(client);
    Mac answer = server_proof(rv_.key, rv_.nonce, p.client, o_.rank, p.server_challenge, p.client_challenge);
    p.out.append(reinterpret_cast<const char*>(answer.data()), answer.size());
    p.have = 0;
    p.need = sizeof(kAck);
    p.deadline = after(o_.timeout_s);
    step(p, 0);
  }

  const MeshOptions o_;
  const Rendezvous& rv_;
  int fd_ = -1;
  std::string address_;
  std::vector<Pending> pending_;
  std::vector<int> peers_;
  std::vector<char> wanted_;
  std::string error_;
  size_t refused_ = 0;
};

// ------------------------------------------------------------------ connecting side
std::string handshake(int fd, const MeshOptions& o, const std::string& key, const std::string& nonce,
                      int server, Clock::time_point deadline) {
  unsigned char hello[kServerHello];
  std::string err = read_exact(fd, hello, sizeof(hello), deadline);
  if (!err.empty()) return err;
  if (std::memcmp(hello, kHello, sizeof(kHello)) != 0) return "the listener does not speak this protocol";
  Challenge sc, cc;
  std::memcpy(sc.data(), hello + sizeof(kHello), sc.size());
  random_bytes(cc.data(), cc.size());
  unsigned char msg[kClientProof];
  std::memcpy(msg, kHello, sizeof(kHello));
  put_u32(msg + 8, static_cast<uint32_t>(o.rank));
  put_u32(msg + 12, static_cast<uint32_t>(server));
  std::memcpy(msg + 16, cc.data(), cc.size());
  Mac mine = client_proof(key, nonce, o.rank, server, sc, cc);
  std::memcpy(msg + 16 + kChallengeBytes, mine.data(), mine.size());
  if (!(err = write_all(fd, msg, sizeof(msg), deadline)).empty()) return err;
  unsigned char answer[kMacBytes];
  if (!(err = read_exact(fd, answer, sizeof(answer), deadline)).empty())
    return err + " (does every rank hold the same job secret?)";
  Mac want = server_proof(key, nonce, o.rank, server, sc, cc);
  if (!same_mac(answer, want.data())) return "the listener did not prove it holds the job secret";
  return write_all(fd, kAck, sizeof(kAck), deadline);
}

int connect_to(const MeshOptions& o, const std::string& key, const std::string& nonce, int server,
               const std::string& where, Clock::time_point deadline) {
  auto space = where.rfind(' ');
  if (space == std::string::npos)
    throw Error(HVD_ERR_INTERNAL, "init: rank " + std::to_string(server) + " published a bad data address");
  Endpoint ep = resolve(where.substr(0, space), where.substr(space + 1), false);
  std::string last;
  auto delay = milliseconds(10);
  for (;;) {
    auto attempt = std::min(deadline, after(o.handshake_s));
    int fd = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(HVD_ERR_INTERNAL, std::string("init: socket: ") + std::strerror(errno));
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len);
    std::string err;
    if (rc != 0 && errno != EINPROGRESS) {
      err = std::string("connect: ") + std::strerror(errno);
    } else if (rc != 0) {
      int so = 0;
      socklen_t len = sizeof(so);
      if (!wait_fd(fd, POLLOUT, attempt))
        err = "connect timed out";
      else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0 || so != 0)
        err = std::string("connect: ") + std::strerror(so ? so : errno);
    }
    if (err.empty()) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      err = handshake(fd, o, key, nonce, server, attempt);
    }
    if (err.empty()) return fd;
    close_fd(fd);
    last = err;
    if (Clock::now() + delay >= deadline)
      throw Error(HVD_ERR_TIMEOUT, "init: rank " + std::to_string(o.rank) +
                                       " could not open an authenticated "
                                       "data connection to rank " +
                                       std::to_string(server) + " at " + where + " in time (last: " + last +
                                       "); raise HVD_SELECTOR_TIMEOUT if ranks are just slow");
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, milliseconds(500));
  }
}

// Descriptors this process has open now.
size_t open_descriptors() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// Makes room for `more` descriptors under RLIMIT_NOFILE (raising the soft
// limit towards the hard one where needed) or fails with one line saying
// what to raise, before any connection is tried.
void reserve_descriptors(size_t more, const MeshOptions& o) {
  constexpr size_t kSpare = 32;  // listener, pending handshakes, the rest of the process
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const size_t want = open_descriptors() + more + kSpare;
  if (lim.rlim_cur != RLIM_INFINITY && want > lim.rlim_cur) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? want : std::min<rlim_t>(want, lim.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &raised);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur != RLIM_INFINITY && want > lim.rlim_cur)
    throw Error(HVD_ERR_INVALID,
                "rank " + std::to_string(o.rank) + " of " + std::to_string(o.size) + " needs " +
                    std::to_string(more) + " more data connections but may open only " +
                    std::to_string(lim.rlim_cur) + " files (ulimit -n; hard limit " +
                    std::to_string(lim.rlim_max) + "); raise the open-files limit (ulimit -n) on every host");
}

}  // namespace

std::vector<int> connect_peers(const MeshOptions& o, const std::vector<int>& peers, const Rendezvous& rv) {
  std::vector<int> fds(o.size, -1);
  std::vector<char> wanted(o.size, 0);
  for (int q : peers)
    if (q >= 0 && q < o.size && q != o.rank) wanted[q] = 1;
  const bool listens = std::any_of(wanted.begin() + o.rank + 1, wanted.end(), [](char w) { return w != 0; });
  reserve_descriptors(static_cast<size_t>(std::count(wanted.begin(), wanted.end(), 1)), o);
  const auto deadline = after(o.timeout_s);
  std::unique_ptr<Listener> listener;
  std::thread server;
  std::atomic<bool> stop{false};
  auto cleanup = [&] {
    stop = true;
    if (server.joinable()) server.join();
    for (int& fd : fds) close_fd(fd);
  };
  try {
    if (listens) listener = std::make_unique<Listener>(o, wanted, rv);
    rv.publish(listener ? listener->address() : std::string());
    if (listener) server = std::thread([&] { listener->run(deadline, stop); });
    for (int s = 0; s < o.rank; ++s)
      if (wanted[s]) fds[s] = connect_to(o, rv.key, rv.nonce, s, rv.address_of(s), deadline);
  } catch (...) {
    cleanup();
    throw;
  }
  if (server.joinable()) server.join();
  if (listener) {
    if (!listener->error().empty()) {
      std::string why = listener->error();
      cleanup();
      throw Error(HVD_ERR_TIMEOUT, why);
    }
    auto got = listener->take();
    for (int q = o.rank + 1; q < o.size; ++q) fds[q] = got[q];
  }
  return fds;
}

std::vector<int> connect_mesh(const MeshOptions& o, const std::vector<int>& peers, const hvd_store& store) {
  if (o.size <= 1) return std::vector<int>(o.size, -1);
  Rendezvous rv;
  rv.key.assign(static_cast<const char*>(store.key ? store.key : ""), store.key ? store.key_len : 0);
  if (rv.key.size() < kMinKeyBytes)
    throw Error(HVD_ERR_INVALID,
                "init: the data connections of a " + std::to_string(o.size) +
                    "-rank job need the job secret (at least " + std::to_string(kMinKeyBytes) +
                    " bytes) to authenticate peers; start the ranks with hvd-selector run or "
                    "set HVD_SELECTOR_SECRET_FILE");
  const auto deadline = after(o.timeout_s);
  if (store.gather) {
    // One gather: every rank's address (rank 0's after the mesh's fresh nonce).
    std::vector<std::string> table;
    if (o.rank == 0) {
      rv.nonce.resize(kNonceBytes);
      random_bytes(&rv.nonce[0], rv.nonce.size());
    }
    rv.publish = [&](const std::string& address) {
      table = store_gather(store, "tcp/mesh/", o.rank, o.size, o.rank == 0 ? rv.nonce + address : address,
                           deadline);
      if (table[0].size() < kNonceBytes)
        throw Error(HVD_ERR_INTERNAL, "init: the data-plane nonce is malformed");
      rv.nonce = table[0].substr(0, kNonceBytes);
      table[0].erase(0, kNonceBytes);
    };
    rv.address_of = [&](int q) { return table[q]; };
    return connect_peers(o, peers, rv);
  }
  if (o.rank == 0) {
    rv.nonce.resize(kNonceBytes);
    random_bytes(&rv.nonce[0], rv.nonce.size());
    store_set(store, "tcp/nonce", rv.nonce);
  } else {
    rv.nonce = store_get(store, "tcp/nonce", deadline);
    if (rv.nonce.size() != kNonceBytes)
      throw Error(HVD_ERR_INTERNAL, "init: the data-plane nonce is malformed");
  }
  rv.publish = [&](const std::string& address) {
    if (!address.empty()) store_set(store, "tcp/addr/" + std::to_string(o.rank), address);
  };
  rv.address_of = [&](int q) { return store_get(store, "tcp/addr/" + std::to_string(q), deadline); };
  return connect_peers(o, peers, rv);
}

}  // namespace tcp
}  // namespace hvd
