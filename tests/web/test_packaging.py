"""The dashboard's templates and static files ship inside the wheel, as package data."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "src" / "py_reactor" / "web"
DATA = sorted(
    path.relative_to(WEB).as_posix()
    for folder in ("templates", "static")
    for path in (WEB / folder).iterdir()
    if path.is_file()
)


def test_the_package_has_its_templates_and_static_files() -> None:
    """The source tree holds the pages' templates and the dashboard's script and styles."""
    for name in ("templates/base.html", "templates/coordination.html", "static/dashboard.js"):
        assert name in DATA


def test_the_wheel_contains_every_template_and_static_file(tmp_path: Path) -> None:
    """A wheel built from the project ships every file the dashboard loads, byte for byte."""
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    [wheel] = tmp_path.glob("py_reactor-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        members = set(archive.namelist())
        for name in DATA:
            member = f"py_reactor/web/{name}"
            assert member in members, f"{member} is missing from {wheel.name}"
            assert archive.read(member) == (WEB / name).read_bytes()
