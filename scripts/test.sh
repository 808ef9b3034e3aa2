#!/usr/bin/env bash
# Installs py_reactor with its dev tools into ./.venv and runs every check: ruff, mypy, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
.venv/bin/ruff check src tests examples benchmarks
.venv/bin/ruff format --check src tests examples benchmarks
.venv/bin/mypy
.venv/bin/pytest "$@"
