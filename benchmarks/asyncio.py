"""asyncio vs threads: the launcher of ``_asyncio_bench`` (issue 22 names this file).

Run from the repository root: ``python benchmarks/asyncio.py`` (``--quick`` for a short run).
What it measures and how is in ``_asyncio_bench.py`` and ``benchmarks/README.md``.

A file named ``asyncio.py`` shadows the standard library's ``asyncio`` for every script of this
folder, whose folder Python puts first on ``sys.path``: when another benchmark's ``import
asyncio`` finds this file, it loads the standard library's module in its place (the import
system returns what ``sys.modules`` holds once the module ran) and does nothing else.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _standard_library_asyncio() -> None:
    """Load the standard library's asyncio under its name, instead of this file."""
    import importlib.machinery
    import importlib.util

    path = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]
    spec = importlib.machinery.PathFinder.find_spec("asyncio", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["asyncio"] = module
    spec.loader.exec_module(module)


if __name__ == "asyncio":  # a sibling script's `import asyncio` found this file
    _standard_library_asyncio()
elif __name__ == "__main__":
    # Python put this folder first on sys.path: move it last, so that `import asyncio` is the
    # standard library's; the helpers beside this file are still found.
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]
    sys.path.append(str(HERE))
    from _asyncio_bench import main

    raise SystemExit(main())
