#!/usr/bin/env bash
# README main job on a fresh machine: install what building and running need (not the test
# toolchain: that is `bash .ci/install-deps` alone), then build a local
# variant index for this machine, install from it with stock pip, run a 2-rank allreduce.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash .ci/install-deps --build-only
exec python3 -m ci.quickstart "$@"
