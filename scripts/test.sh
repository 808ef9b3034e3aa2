#!/usr/bin/env bash
# Installs py_reactor with its dev tools into ./.venv and runs every check: ruff, mypy, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The dashboard's browser tests drive Debian's chromium through Playwright (no browser download).
if ! command -v chromium >/dev/null 2>&1; then
  as_root=""; [ "$(id -u)" -eq 0 ] || as_root="sudo"
  $as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq chromium >/dev/null
fi
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
.venv/bin/ruff check src tests examples benchmarks
.venv/bin/ruff format --check src tests examples benchmarks
.venv/bin/mypy
.venv/bin/pytest "$@"
