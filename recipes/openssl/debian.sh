#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# OpenSSL's libcrypto from Debian/Ubuntu (libssl-dev: headers and libcrypto.so),
# what the gloo controller's TCP mesh links for HMAC-SHA256. The library is
# shared, so auditwheel repair grafts it into a wheel. Prints OPENSSL_ROOT_DIR
# for find_package(OpenSSL).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
apt_ensure libssl-dev
OPENSSL_CFLAGS=""
OPENSSL_LIBS="-lcrypto"
scratch
verify_openssl
emit OPENSSL_ROOT_DIR /usr
