"""Lazy package exports: names resolved from their submodule on first access.

Packages export classes whose modules pull in heavy libraries (openai, torch, e2b...);
PEP 562's module ``__getattr__`` keeps ``import twinkle.X`` light until a name is used.

Example:
    >>> __getattr__ = lazy_getattr('demo', {'dumps': 'json'})
    >>> __getattr__('dumps').__name__
    'dumps'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``table[name]`` and returns its ``name``."""

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
