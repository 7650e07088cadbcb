#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# OpenSSL for a pip-only environment. No PyPI package ships libcrypto's
# headers, so this only proves the system's OpenSSL (OPENSSL_ROOT_DIR, else
# /usr) compiles and runs HMAC-SHA256, and says which system package to
# install when it does not.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
root="${OPENSSL_ROOT_DIR:-/usr}"
[ -f "$root/include/openssl/hmac.h" ] \
  || die "no OpenSSL headers under $root (PyPI has none): apt install libssl-dev, or dnf install openssl-devel, or set OPENSSL_ROOT_DIR"
OPENSSL_CFLAGS="-I$root/include"
OPENSSL_LIBS="-L$root/lib -L$root/lib64 -lcrypto"
scratch
verify_openssl
emit OPENSSL_ROOT_DIR "$root"
