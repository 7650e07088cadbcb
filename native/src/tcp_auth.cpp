// HMAC-SHA256 proofs of the data connections (see tcp_auth.h).
#include "tcp_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "common.h"

namespace hvd {
namespace tcp {

Mac hmac_sha256(const std::string& key, const void* data, size_t len) {
  Mac out{};
  unsigned int out_len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), static_cast<const unsigned char*>(data),
            len, out.data(), &out_len) ||
      out_len != out.size())
    throw Error(HVD_ERR_INTERNAL, "init: HMAC-SHA256 failed in libcrypto");
  return out;
}

void random_bytes(void* out, size_t len) {
  auto* p = static_cast<unsigned char*>(out);
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(HVD_ERR_INTERNAL, std::string("init: getrandom failed: ") + std::strerror(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

bool same_mac(const unsigned char* a, const unsigned char* b) { return CRYPTO_memcmp(a, b, kMacBytes) == 0; }

namespace {

void put_u32(std::string& s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xff));
}

// label | nonce | u32 client | u32 server | server challenge | client challenge
Mac proof(const char* label, const std::string& key, const std::string& nonce, int client, int server,
          const Challenge& sc, const Challenge& cc) {
  std::string msg(label, std::strlen(label) + 1);  // with its NUL: no label is a prefix of another
  msg += nonce;
  put_u32(msg, static_cast<uint32_t>(client));
  put_u32(msg, static_cast<uint32_t>(server));
  msg.append(reinterpret_cast<const char*>(sc.data()), sc.size());
  msg.append(reinterpret_cast<const char*>(cc.data()), cc.size());
  return hmac_sha256(key, msg.data(), msg.size());
}

}  // namespace

Mac client_proof(const std::string& key, const std::string& nonce, int client, int server,
                 const Challenge& server_challenge, const Challenge& client_challenge) {
  return proof("hvd-selector tcp client", key, nonce, client, server, server_challenge, client_challenge);
}

Mac server_proof(const std::string& key, const std::string& nonce, int client, int server,
                 const Challenge& server_challenge, const Challenge& client_challenge) {
  return proof("hvd-selector tcp server", key, nonce, client, server, server_challenge, client_challenge);
}

}  // namespace tcp
}  // namespace hvd
