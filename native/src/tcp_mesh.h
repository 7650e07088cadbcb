// The core's authenticated TCP mesh: one connection per pair of ranks, each
// handed over only after both ends proved they hold the job secret.
//
// A rank connects only to the peers it is asked to (the ranks the collective
// algorithms talk to, tcp_algorithms.h; every rank for alltoall). A rank
// with a higher peer listens on `hostname` (an ephemeral port, published
// through the rendezvous store, or through the links already up for
// connections made later) and keeps accepting until every higher peer has
// proven itself or the timeout passes, then stops listening; it connects to
// every lower peer. Per connection (C connects to listener S):
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

#include <functional>
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

// Where the peers listen: `publish` is called once on every rank, with this
// rank's listener address or "" when it has no higher peer (it may be a
// collective step), then `address_of(q)` for each lower peer q. `nonce` is
// fresh per mesh and the same on every rank; `key` is the job secret.
struct Rendezvous {
  std::string key, nonce;
  std::function<void(const std::string&)> publish;
  std::function<std::string(int)> address_of;
};

// fds[q]: a connected TCP socket to rank q whose other end proved itself,
// for each q in `peers` (which must be symmetric across ranks: q lists this
// rank iff this rank lists q), else -1; the caller owns them. Throws Error
// (HVD_ERR_TIMEOUT naming the missing ranks).
std::vector<int> connect_peers(const MeshOptions& options, const std::vector<int>& peers,
                               const Rendezvous& rv);

// connect_peers through the rendezvous store: one gather of every rank's
// address ("tcp/mesh/<r>", rank 0's after the nonce) where the store has
// one, else "tcp/nonce" and "tcp/addr/<r>" key by key; the job secret is
// store.key (HVD_ERR_INVALID without one).
std::vector<int> connect_mesh(const MeshOptions& options, const std::vector<int>& peers,
                              const hvd_store& store);

}  // namespace tcp
}  // namespace hvd
