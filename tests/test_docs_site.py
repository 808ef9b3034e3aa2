"""The documentation builds as a site (mkdocs-material, ``mkdocs.yml``) in strict mode: every
page is in the navigation, and every link between pages and to a heading resolves.

``tests/test_docs.py`` runs the pages' examples; this module checks that they hang together.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_docs_site_builds_with_every_link_resolved(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "index.html").exists() or (tmp_path / "getting-started").is_dir()
