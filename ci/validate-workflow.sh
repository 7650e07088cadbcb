#!/usr/bin/env bash
# Validate the generated workflow the way the tests do: it is current, it passes
# GitHub's workflow schema and actionlint, and every job's cibuildwheel
# environment selects exactly its builds.
set -euo pipefail
cd "$(dirname "$0")/.."
wf=.github/workflows/wheels.yml
python -m selector_backend matrix --format github --check "$wf"
check-jsonschema --builtin-schema vendor.github-workflows "$wf"
actionlint "$wf"
python -m selector_backend matrix --format json | python -c '
import json, os, subprocess, sys
jobs = json.load(sys.stdin)
base = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
for job in jobs:
    out = subprocess.run(["cibuildwheel", "--print-build-identifiers", "--platform", "linux", "."],
                         env={**base, **job["environment"]}, capture_output=True, text=True)
    got = out.stdout.split()
    if out.returncode or got != job["environment"]["CIBW_BUILD"].split():
        name = job["name"]
        sys.exit(f"{name}: cibuildwheel selected {got or out.stderr.strip()}")
print(f"cibuildwheel: all {len(jobs)} jobs select their builds")
'
