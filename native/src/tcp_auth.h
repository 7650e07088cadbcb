// Proofs for the core's TCP data connections: HMAC-SHA256 keyed by the job
// secret (OpenSSL's libcrypto), bound to a per-mesh nonce from the
// authenticated rendezvous store, both ranks, the direction and both
// sides' fresh challenges, so a proof is good for one connection only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd {
namespace tcp {

constexpr size_t kMacBytes = 32;
constexpr size_t kChallengeBytes = 32;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMinKeyBytes = 16;

using Mac = std::array<unsigned char, kMacBytes>;
using Challenge = std::array<unsigned char, kChallengeBytes>;

Mac hmac_sha256(const std::string& key, const void* data, size_t len);

// Bytes from the kernel's CSPRNG (getrandom); throws when it fails.
void random_bytes(void* out, size_t len);

// Constant-time comparison of two MACs.
bool same_mac(const unsigned char* a, const unsigned char* b);

// What the connecting rank (`client`) proves to the listening rank
// (`server`), and the answer; the two labels keep one from standing in for
// the other.
Mac client_proof(const std::string& key, const std::string& nonce, int client, int server,
                 const Challenge& server_challenge, const Challenge& client_challenge);
Mac server_proof(const std::string& key, const std::string& nonce, int client, int server,
                 const Challenge& server_challenge, const Challenge& client_challenge);

}  // namespace tcp
}  // namespace hvd
