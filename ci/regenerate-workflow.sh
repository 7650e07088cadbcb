#!/usr/bin/env bash
# Regenerate .github/workflows/wheels.yml from variants/catalog.toml (commit both).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m selector_backend matrix --format github -o .github/workflows/wheels.yml "$@"
