"""The plugin's tests run fresh pytest sessions through ``pytester``."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Load pytest's own ``pytester`` plugin for these tests unless ``-p pytester`` did."""
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
