"""Loading a benchmark script (``bench/<name>.py``, not a package) as a module for its tests."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@contextlib.contextmanager
def load_bench(name: str) -> Iterator[ModuleType]:
    """``bench/<name>.py`` imported as ``twinkle_bench_<name>`` (registered while in use, for
    its dataclasses and pickling). Environment defaults a script sets at import (Prefect's log
    level, say) are undone at once: they must not leak into other tests."""
    spec = importlib.util.spec_from_file_location(f"twinkle_bench_{name}", BENCH_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    saved = dict(os.environ)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        yield module
    finally:
        sys.modules.pop(spec.name, None)
