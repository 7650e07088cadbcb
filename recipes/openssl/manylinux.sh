#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# OpenSSL's libcrypto inside a manylinux_2_28 container (cibuildwheel
# before-all; AlmaLinux 8, also under PyTorch's CUDA builder images): the
# openssl-devel RPM. auditwheel repair grafts libcrypto.so into the wheel
# (the manylinux policy does not count it as a system library).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
if [ ! -f /usr/include/openssl/hmac.h ]; then
  [ "$CHECK_ONLY" = 1 ] && die "OpenSSL's headers are missing; run: dnf install -y openssl-devel"
  if command -v dnf >/dev/null; then
    say "installing openssl-devel"
    dnf install -y -q openssl-devel >&2 || die "dnf could not install openssl-devel"
  elif command -v yum >/dev/null; then
    yum install -y -q openssl-devel >&2 || die "yum could not install openssl-devel"
  else
    die "no dnf or yum: not a manylinux_2_28 container; pick the debian or pip recipe"
  fi
fi
OPENSSL_CFLAGS=""
OPENSSL_LIBS="-lcrypto"
scratch
verify_openssl
emit OPENSSL_ROOT_DIR /usr
