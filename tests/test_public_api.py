"""The top-level package: exactly the promised names, light imports, typing marker shipped."""

import importlib
import json
import subprocess
import sys
import types
from importlib import resources
from pathlib import Path

import pytest

import py_reactor

#: Names DESIGN.md §2 promises that the engine and coordination stages build.
PROMISED_NOW = (
    "Reactor",
    "Step",
    "step",
    "compose",
    "map_step",
    "Element",
    "MapResult",
    "async_step",
    "async_reactor",
    "parallel",
    "Input",
    "Result",
    "Value",
    "Success",
    "Failure",
    "Halt",
    "Skipped",
    "retries",
    "configure",
    "with_lock",
    "with_semaphore",
    "with_rate_limit",
    "with_period",
    "with_ordered_lock",
    "Lock",
    "Semaphore",
    "RateLimit",
    "Period",
    "OrderedLock",
)

#: Optional heavy dependencies that a bare ``import py_reactor`` must not pull in.
HEAVY = ("celery", "redis", "starlette", "opentelemetry")


def test_every_name_in_all_is_importable() -> None:
    """Each name listed in py_reactor.__all__ is an attribute of the package, without repeats."""
    assert len(py_reactor.__all__) == len(set(py_reactor.__all__))
    for name in py_reactor.__all__:
        assert hasattr(py_reactor, name), name
    namespace: dict[str, object] = {}
    exec("from py_reactor import *", namespace)
    assert set(py_reactor.__all__) <= set(namespace)


def test_all_lists_every_public_non_module_attribute() -> None:
    """Every public attribute of the package that is not a submodule is listed in __all__."""
    public = {
        name
        for name, value in vars(py_reactor).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    listed = {name for name in py_reactor.__all__ if not name.startswith("_")}

    assert public == listed


@pytest.mark.parametrize("name", PROMISED_NOW)
def test_promised_names_exist(name: str) -> None:
    """The names DESIGN.md §2 promises for this stage are exported from py_reactor."""
    assert name in py_reactor.__all__
    assert getattr(py_reactor, name) is not None


def test_import_does_not_load_heavy_optional_dependencies() -> None:
    """A bare `import py_reactor` loads none of celery, redis, starlette or opentelemetry."""
    probe = (
        "import json, sys\n"
        "import py_reactor\n"
        f"heavy = {HEAVY!r}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(json.dumps({'ok': 'py_reactor' in sys.modules, 'loaded': loaded}))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=60
    )

    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    assert report["loaded"] == []


def test_py_typed_is_shipped_in_the_package_directory() -> None:
    """The PEP 561 marker py.typed sits next to py_reactor/__init__.py."""
    package_dir = Path(py_reactor.__file__).parent

    assert (package_dir / "py.typed").is_file()
    assert resources.files("py_reactor").joinpath("py.typed").is_file()


def test_errors_module_exports_the_error_tree() -> None:
    """py_reactor.errors exports ReactorError and its subclasses, all derived from it."""
    errors = importlib.import_module("py_reactor.errors")

    for name in (
        "DefinitionError",
        "InputValidationError",
        "ArgumentResolutionError",
        "SerializationError",
        "DispatchError",
        "CoordinationError",
        "LockAcquisitionError",
        "SemaphoreAcquisitionError",
        "RateLimitExceededError",
        "OrderedLockWaitError",
        "CoordinationKeyError",
        "StoreUnavailableError",
        "ExecutionNotFoundError",
        "CorruptRecordError",
    ):
        assert name in errors.__all__
        assert issubclass(getattr(errors, name), errors.ReactorError)


def test_an_unknown_id_and_a_damaged_record_have_errors_of_the_tree_exported_at_the_top() -> None:
    """ExecutionNotFoundError (also a LookupError, as an unknown id always was) and
    CorruptRecordError are py_reactor's own, importable from the package and its errors
    module, and named in the tree the errors module's docstring draws."""
    errors = importlib.import_module("py_reactor.errors")

    assert py_reactor.ExecutionNotFoundError is errors.ExecutionNotFoundError
    assert py_reactor.CorruptRecordError is errors.CorruptRecordError
    assert issubclass(errors.ExecutionNotFoundError, LookupError)
    assert issubclass(errors.ExecutionNotFoundError, errors.ReactorError)
    assert not issubclass(errors.CorruptRecordError, LookupError)  # the record is there
    for name in ("ExecutionNotFoundError", "CorruptRecordError"):
        assert f"── {name} " in (errors.__doc__ or ""), name
    error = errors.ExecutionNotFoundError("no execution 'x' is stored", execution_id="x")
    assert (error.execution_id, str(error)) == ("x", "no execution 'x' is stored")
    damaged = errors.CorruptRecordError("bad", execution_id="y", problem="its outcome is not JSON")
    assert (damaged.execution_id, damaged.problem) == ("y", "its outcome is not JSON")


def test_status_and_trace_kind_are_string_enums_of_the_states_module() -> None:
    """Status and TraceKind are exported from their one home, and compare as their strings."""
    states = importlib.import_module("py_reactor.states")

    assert py_reactor.Status is states.Status
    assert py_reactor.TraceKind is states.TraceKind
    assert py_reactor.Status.COMPLETED == "completed"
    assert py_reactor.TraceKind.RUN == "run"
    assert json.dumps([py_reactor.TraceKind.PARKED]) == '["parked"]'
