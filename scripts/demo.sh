#!/usr/bin/env bash
# Installs py_reactor into ./.venv and runs the demo reactor (no server needed).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
.venv/bin/python examples/demo.py
