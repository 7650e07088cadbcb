// Framed, concurrent transfers over the authenticated mesh (see tcp_exchange.h).
#include "tcp_exchange.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common.h"

namespace hvd {
namespace tcp {
namespace {

using Clock = std::chrono::steady_clock;

void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (56 - 8 * i));
}

uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// The iovecs of a frame + payload from byte `done` on.
int frame_iov(iovec* iov, unsigned char* frame, void* payload, size_t bytes, size_t done) {
  int n = 0;
  if (done < kFrameBytes) {
    iov[n++] = {frame + done, kFrameBytes - done};
    done = 0;
  } else {
    done -= kFrameBytes;
  }
  if (bytes > done) iov[n++] = {static_cast<unsigned char*>(payload) + done, bytes - done};
  return n;
}

// A rank waiting in an exchange polls without sleeping for this long first,
// with sched_yield between polls (a peer sharing its core runs at once; on an
// idle core each poll is one system call), then sleeps in poll(2). Sleeping at
// once put the scheduler's wake-up into every round: 4 KiB collectives at 2
// and 4 ranks took 1.5-4x as long. 0.3 ms gained as much there as 3 ms, and
// cost oversubscribed jobs (8 ranks on 2 cores) next to nothing where 2 ms
// made them 1.1-1.4x slower (docs/reference/performance.md).
constexpr std::chrono::microseconds kBusyWait{300};

// One transfer's progress in both directions.
struct Progress {
  Transfer* t = nullptr;
  int fd = -1;
  unsigned char out_frame[kFrameBytes] = {0};
  unsigned char in_frame[kFrameBytes] = {0};
  size_t out_done = 0, in_done = 0;
  size_t in_bytes = 0;                     // the payload expected (up_to: the capacity until the frame says)
  bool out_open = false, in_open = false;  // still to finish
  uint64_t expect_seq = 0;
};

[[noreturn]] void lost(const char* what, int peer, const std::string& why) {
  throw Error(HVD_ERR_PEER, std::string(what) + ": lost connection to rank " + std::to_string(peer) +
                                ", which probably died or gave up after losing a peer (" + why + ")");
}

// Sends until done (true) or the socket is full (false).
bool push(Progress& p, const char* what) {
  const size_t total = kFrameBytes + p.t->send_bytes;
  while (p.out_done < total) {
    iovec iov[2];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(
        frame_iov(iov, p.out_frame, const_cast<void*>(p.t->send), p.t->send_bytes, p.out_done));
    ssize_t put = ::sendmsg(p.fd, &msg, MSG_NOSIGNAL);
    if (put > 0) {
      p.out_done += static_cast<size_t>(put);
    } else if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;
    } else if (put < 0 && errno == EINTR) {
      continue;
    } else {
      lost(what, p.t->peer, std::string("send: ") + std::strerror(errno));
    }
  }
  return true;
}

// Receives until done (true) or nothing more is there yet (false); checks
// the frame as soon as it is complete.
// A message of unknown length (up_to) is read frame first, never past its end:
// the peer's next message may already follow it on the stream.
bool pull(Progress& p, const char* what) {
  while (p.in_done < kFrameBytes + p.in_bytes) {
    iovec iov[2];
    const bool frame_only = p.t->up_to && p.in_done < kFrameBytes;
    int n = frame_iov(iov, p.in_frame, p.t->recv, frame_only ? 0 : p.in_bytes, p.in_done);
    ssize_t got = ::readv(p.fd, iov, n);
    if (got > 0) {
      bool had_frame = p.in_done >= kFrameBytes;
      p.in_done += static_cast<size_t>(got);
      if (!had_frame && p.in_done >= kFrameBytes) {
        uint64_t seq = get_u64(p.in_frame), bytes = get_u64(p.in_frame + 8);
        if (p.t->up_to && bytes <= p.t->recv_bytes) p.in_bytes = p.t->received = bytes;
        if (seq != p.expect_seq || bytes != p.in_bytes)
          throw Error(HVD_ERR_MISMATCH,
                      std::string(what) + ": rank " + std::to_string(p.t->peer) + " sent message " +
                          std::to_string(seq) + " of " + std::to_string(bytes) +
                          " bytes where this rank expected message " + std::to_string(p.expect_seq) + " of " +
                          (p.t->up_to ? "at most " : "") + std::to_string(p.t->recv_bytes) +
                          " bytes: the ranks are not running the same collectives");
      }
    } else if (got == 0) {
      lost(what, p.t->peer, "it closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return false;
    } else if (errno != EINTR) {
      lost(what, p.t->peer, std::string("recv: ") + std::strerror(errno));
    }
  }
  return true;
}

}  // namespace

Exchange::Exchange(std::vector<int> fds, int rank)
    : fds_(std::move(fds)), sent_(fds_.size(), 0), received_(fds_.size(), 0), rank_(rank) {
  int one = 1;
  for (int fd : fds_)
    if (fd >= 0) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void Exchange::adopt(int peer, int fd) {
  if (peer < 0 || peer >= size() || peer == rank_ || fds_[peer] >= 0)
    throw Error(HVD_ERR_INTERNAL, "a second connection to rank " + std::to_string(peer));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fds_[peer] = fd;
}

Exchange::~Exchange() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

void Exchange::run(std::vector<Transfer>& transfers, double timeout_s, const char* what) {
  if (failed_status_ != 0) throw Error(static_cast<hvd_status>(failed_status_), failed_);
  std::vector<Progress> progress(transfers.size());
  for (size_t i = 0; i < transfers.size(); ++i) {
    Transfer& t = transfers[i];
    if (t.peer < 0 || t.peer >= size() || t.peer == rank_ || fds_[t.peer] < 0)
      throw Error(HVD_ERR_INTERNAL, std::string(what) + ": no connection to rank " + std::to_string(t.peer));
    Progress& p = progress[i];
    p.t = &t;
    p.fd = fds_[t.peer];
    p.out_open = t.sends;
    p.in_open = t.receives;
    put_u64(p.out_frame, sent_[t.peer]);
    put_u64(p.out_frame + 8, t.send_bytes);
    p.expect_seq = received_[t.peer];
    p.in_bytes = t.recv_bytes;
    t.received = t.up_to ? 0 : t.recv_bytes;
  }
  try {
    const auto start = Clock::now();
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    const auto busy_until = start + kBusyWait;
    std::vector<pollfd> fds;
    std::vector<Progress*> polled;
    // First every transfer moves what it can, then only those poll(2) wakes.
    for (auto& p : progress) {
      if (p.out_open && push(p, what)) p.out_open = false;
      if (p.in_open && pull(p, what)) p.in_open = false;
    }
    for (;;) {
      fds.clear();
      polled.clear();
      for (auto& p : progress) {
        if (!p.out_open && !p.in_open) continue;
        fds.push_back({p.fd, static_cast<short>((p.out_open ? POLLOUT : 0) | (p.in_open ? POLLIN : 0)), 0});
        polled.push_back(&p);
      }
      if (fds.empty()) break;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::string who;
        for (Progress* p : polled) who += (who.empty() ? "" : ", ") + std::to_string(p->t->peer);
        throw Error(HVD_ERR_TIMEOUT, std::string(what) + ": rank(s) " + who + " did not respond in time (" +
                                         std::to_string(timeout_s) +
                                         " s); raise HVD_SELECTOR_TIMEOUT if ranks are just slow");
      }
      const bool busy = Clock::now() < busy_until;  // kBusyWait: polls that do not sleep first
      int rc = ::poll(fds.data(), fds.size(), busy ? 0 : static_cast<int>(std::min<int64_t>(left, 1000)));
      if (rc < 0 && errno != EINTR)
        throw Error(HVD_ERR_INTERNAL, std::string(what) + ": poll: " + std::strerror(errno));
      if (rc == 0 && busy) sched_yield();
      if (rc <= 0) continue;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Progress& p = *polled[i];
        // POLLHUP/POLLERR: the read or write below reports the reason.
        if (p.out_open && (fds[i].revents & (POLLOUT | POLLHUP | POLLERR)) && push(p, what))
          p.out_open = false;
        if (p.in_open && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && pull(p, what)) p.in_open = false;
      }
    }
  } catch (const Error& exc) {
    fail(exc.status(), exc.what());
  }
  for (const Transfer& t : transfers) {
    sent_[t.peer] += t.sends;
    received_[t.peer] += t.receives;
  }
}

void Exchange::fail(hvd_status status, const std::string& message) {
  failed_status_ = status;
  failed_ = message;
  // The streams are lost: shut every connection down, so the peers waiting
  // on this rank fail at once with PeerFailureError instead of waiting out
  // the timeout (in a job that connects only the algorithms' peers, a
  // death travels this way to the ranks not connected to the dead one).
  for (int fd : fds_)
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  throw Error(status, message);
}

}  // namespace tcp
}  // namespace hvd
