# shellcheck shell=bash
# Compile and run HMAC-SHA256 over a known message against libcrypto (sourced
# by the OpenSSL recipes): the one thing the gloo controller's TCP mesh needs
# from OpenSSL. Needs OPENSSL_CFLAGS/OPENSSL_LIBS; uses SCRATCH.
verify_openssl() {
  cat > "$SCRATCH/hmac.c" <<'C'
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  /* RFC 4231 test case 2: key "Jefe" */
  const char *msg = "what do ya want for nothing?";
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), "Jefe", 4, (const unsigned char *)msg, strlen(msg), mac, &len);
  printf("hmac-sha256 %02x%02x%02x%02x\n", mac[0], mac[1], mac[2], mac[3]);
  return len == 32 && mac[0] == 0x5b && mac[1] == 0xdc && mac[2] == 0xc1 && mac[3] == 0x46 ? 0 : 1;
}
C
  # shellcheck disable=SC2086
  ${CC:-cc} "$SCRATCH/hmac.c" -o "$SCRATCH/hmac" $OPENSSL_CFLAGS $OPENSSL_LIBS >&2 \
    || die "cannot compile and link an HMAC-SHA256 program against libcrypto (flags: $OPENSSL_CFLAGS $OPENSSL_LIBS)"
  local out
  out="$(timeout 60 "$SCRATCH/hmac" 2>&1)" || die "the libcrypto test program failed: $out"
  say "verified: $out"
}
