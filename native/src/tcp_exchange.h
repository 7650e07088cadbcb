// Moving bytes over the authenticated mesh (tcp_mesh.h): the one data path
// of the gloo controller's collectives. Nothing reaches these sockets before
// both ends proved the job secret, and nothing listens once the mesh is up.
//
// A collective is a sequence of exchanges; in an exchange a rank sends at
// most one message to and receives at most one message from each peer, all
// at once (non-blocking sockets and poll(2)), so no order of peers can
// deadlock. Each message is framed:
//   u64 sequence number (per connection and direction) | u64 payload bytes | payload
// and the receiver checks both against what its own collective expects: ranks
// that run different collectives fail with HVD_ERR_MISMATCH at the first
// message instead of reading each other's bytes as data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace hvd {
namespace tcp {

constexpr size_t kFrameBytes = 16;

// One peer's part of an exchange, {peer, sends, send, send_bytes, receives,
// recv, recv_bytes, up_to}: a direction that is off carries no message at all
// (an empty message still carries its frame). With up_to, recv_bytes is a
// capacity: the peer's message may be shorter (the agreement round, whose
// blocks each rank sizes to its own call), and `received` says how long it was.
struct Transfer {
  int peer = -1;
  bool sends = false;
  const void* send = nullptr;
  size_t send_bytes = 0;
  bool receives = false;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  bool up_to = false;
  size_t received = 0;
};

class Exchange {
 public:
  // fds[q]: the proven connection to rank q, or -1 where there is none
  // (fds[rank] == -1); owned from now on.
  Exchange(std::vector<int> fds, int rank);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Runs every transfer to completion or throws Error: HVD_ERR_TIMEOUT after
  // timeout_s, HVD_ERR_PEER when a peer closed its connection, HVD_ERR_MISMATCH
  // on a frame this rank did not expect. After an error every connection is
  // shut down (its peers fail too, at once) and every later exchange fails
  // at once with the same error (the streams' positions are lost).
  // `what` names the collective in messages.
  void run(std::vector<Transfer>& transfers, double timeout_s, const char* what);

  // Fails every later exchange with `status` and shuts every connection down
  // (as run() does on an error): for what a caller finds wrong in bytes that
  // arrived, so its peers fail at once instead of waiting out the timeout.
  [[noreturn]] void fail(hvd_status status, const std::string& message);

  // Takes a proven connection to `peer` (which had none) made later.
  void adopt(int peer, int fd);
  bool connected(int peer) const { return fds_[peer] >= 0; }

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(fds_.size()); }

 private:
  std::vector<int> fds_;
  std::vector<uint64_t> sent_, received_;  // messages per peer and direction so far
  int rank_;
  int failed_status_ = 0;
  std::string failed_;
};

}  // namespace tcp
}  // namespace hvd
