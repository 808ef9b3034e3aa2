#!/usr/bin/env bash
# Installs py_reactor into ./.venv and runs `py-reactor demo` (no server needed): step-scoped
# coordination at work on background workers, then the saga tour of examples/demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[demo]'
.venv/bin/py-reactor demo
.venv/bin/python examples/demo.py
