// The core's authenticated TCP mesh: one connection per pair of ranks, each
// handed over only after both ends proved they hold the job secret.
//
// Every rank but the last listens on `hostname` (an ephemeral port,
// published through the rendezvous store) and keeps accepting until every
// higher rank has proven itself or the init timeout passes; it connects to
// every lower rank. Per connection (C connects to listener S):
//   S -> C  "hvdtcp1\n" | server challenge (32)
//   C -> S  "hvdtcp1\n" | u32 C | u32 S | client challenge (32) |
//           HMAC(secret, "hvd-selector tcp client\0" | nonce | C | S | both challenges)
//   S -> C  HMAC(secret, "hvd-selector tcp server\0" | nonce | C | S | both challenges)
//   C -> S  "hvdtcpok"
// The 32-byte nonce is fresh per mesh and comes through the HMAC-
// authenticated store ("tcp/nonce", set by rank 0). A connection that sends
// anything else, stays silent past its handshake deadline, or is the oldest
// of too many unproven ones is closed; the listener goes on waiting, so a
// stray connection never takes a real peer's place.
#pragma once

#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace hvd {
namespace tcp {

struct MeshOptions {
  int rank = 0;
  int size = 1;
  std::string hostname;     // the address this rank listens on
  double timeout_s = 60;    // the whole mesh, as init's timeout
  double handshake_s = 10;  // one unproven connection (capped by timeout_s)
  size_t max_pending = 64;  // unproven connections held at once
  int backlog = 128;        // listen(2)
};

// fds[q]: a connected TCP socket to rank q whose other end proved itself
// (fds[rank] == -1); the caller owns them. The job secret is store.key.
// Throws Error (HVD_ERR_TIMEOUT naming the missing ranks, HVD_ERR_INVALID
// without a secret).
std::vector<int> connect_mesh(const MeshOptions& options, const hvd_store& store);

}  // namespace tcp
}  // namespace hvd
