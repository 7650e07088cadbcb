#!/usr/bin/env bash
# Build what this machine can build and publish it as a variant index in
# ./site (extra arguments go to build-variants, e.g. --entry cpu-gloo-x86_64),
# then print how to serve it and point the installer at it.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m selector_backend build-variants --index site "$@"
echo "serve:   python -m http.server -d site 8000 --bind 127.0.0.1" >&2
echo "install: pip install . -C index-url=http://127.0.0.1:8000/simple" >&2
