"""The dashboard's templates and static files ship inside the wheel, as package data."""

from __future__ import annotations

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


def test_the_wheel_contains_every_template_and_static_file(wheel: zipfile.ZipFile) -> None:
    """A wheel built from the project ships every file the dashboard loads, byte for byte."""
    members = set(wheel.namelist())
    for name in DATA:
        member = f"py_reactor/web/{name}"
        assert member in members, f"{member} is missing from {wheel.filename}"
        assert wheel.read(member) == (WEB / name).read_bytes()
