"""The Lua scripts ship inside the package, each documented, each loadable by the name used."""

from __future__ import annotations

import ast
import re
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from py_reactor.storage.redis import lua_source

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "src" / "py_reactor" / "storage" / "lua"
SCRIPTS = sorted(path.stem for path in LUA.glob("*.lua") if not path.stem.startswith("_"))
#: Shared Lua code that scripts inline with ``-- #include _<name>``.
LIBRARIES = sorted(path.stem for path in LUA.glob("_*.lua"))

#: Calls that name a script, and which positional argument holds the name.
NAMING_CALLS = {"run_script": 0}


def _header(text: str) -> tuple[str, str]:
    """A script's leading ``--`` comment block, and the rest."""
    lines = text.splitlines()
    count = 0
    while count < len(lines) and lines[count].startswith("--"):
        count += 1
    return "\n".join(lines[:count]), "\n".join(lines[count:])


def _script_names_in_source(where: Path = ROOT / "src" / "py_reactor") -> set[str]:
    """Every script name the code under ``where`` passes to ``run_script``."""
    names: set[str] = set()
    for path in where.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            position = NAMING_CALLS.get(str(called))
            if position is None or len(node.args) <= position:
                continue
            argument = node.args[position]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                names.add(argument.value)
            elif isinstance(argument, ast.Name) and argument.id in constants:
                names.add(constants[argument.id])
    return names


def test_the_source_tree_has_scripts() -> None:
    """The Lua folder holds the lock and semaphore scripts (so the checks below see files)."""
    for name in ("lock_acquire", "lock_release", "semaphore_acquire", "wait_cancel"):
        assert name in SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_opens_with_a_header_documenting_keys_args_and_reply(name: str) -> None:
    """Each script starts with a ``--`` header naming its KEYS, the ARGV it reads, and its reply."""
    header, body = _header((LUA / f"{name}.lua").read_text("utf-8"))
    assert header, f"{name}.lua does not open with a -- comment"
    assert "KEYS" in header, f"{name}.lua's header does not describe its KEYS"
    assert re.search(r"\b(Returns|Reply)\b", header), f"{name}.lua's header has no reply"
    used = set(re.findall(r"\b(?:KEYS|ARGV)\[\w+\]", body))
    documented = set(re.findall(r"\b(?:KEYS|ARGV)\[\w+\]", header))
    assert used <= documented, f"{name}.lua uses {sorted(used - documented)} undocumented"


def test_every_script_name_used_in_the_source_loads() -> None:
    """Every script the code runs by name is found through importlib.resources."""
    names = _script_names_in_source()
    assert {"lock_acquire", "lock_release", "semaphore_acquire", "wait_cancel"} <= names
    for name in sorted(names):
        assert lua_source(name).lstrip().startswith("--"), name


def test_only_storage_names_scripts_or_key_layouts() -> None:
    """Outside ``storage/`` no code runs a script by name or spells a Redis key name: the
    primitives call the typed ``Store`` methods."""
    package = ROOT / "src" / "py_reactor"
    for folder in sorted(p for p in package.iterdir() if p.is_dir() and p.name != "storage"):
        assert _script_names_in_source(folder) == set(), folder.name
        for path in folder.rglob("*.py"):
            text = path.read_text("utf-8")
            assert "run_script(" not in text, path
            found = re.search(r"[\"'{]py_reactor:\w", text)  # not a log line "py_reactor: ..."
            assert found is None, f"{path} spells a Redis key name"


def test_every_packaged_script_is_used_by_the_source() -> None:
    """No script in the Lua folder is dead: the code runs each of them by name."""
    assert set(SCRIPTS) <= _script_names_in_source()


def test_the_installed_package_exposes_every_script() -> None:
    """``importlib.resources`` sees the same scripts as the source tree, with the same text."""
    folder = resources.files("py_reactor.storage") / "lua"
    found = sorted(entry.name.removesuffix(".lua") for entry in folder.iterdir())
    assert sorted(found) == sorted(SCRIPTS + LIBRARIES)
    for name in SCRIPTS + LIBRARIES:
        text = (LUA / f"{name}.lua").read_text("utf-8")
        assert (folder / f"{name}.lua").read_text("utf-8") == text


def test_the_wheel_contains_every_script(wheel: zipfile.ZipFile) -> None:
    """A wheel built from the project ships every Lua script, byte for byte."""
    members = set(wheel.namelist())
    for name in SCRIPTS + LIBRARIES:
        member = f"py_reactor/storage/lua/{name}.lua"
        assert member in members, f"{member} is missing from {wheel.filename}"
        assert wheel.read(member) == (LUA / f"{name}.lua").read_bytes()


@pytest.mark.parametrize("name", LIBRARIES)
def test_every_lua_library_is_included_by_a_script(name: str) -> None:
    """Each shared ``_*.lua`` file is inlined by at least one script, and inlining works."""
    including = [s for s in SCRIPTS if f"-- #include {name}" in (LUA / f"{s}.lua").read_text()]
    assert including, f"{name}.lua is included by no script"
    for script in including:
        assert "#include" not in lua_source(script)
        assert lua_source(name) in lua_source(script)
