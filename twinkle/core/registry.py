"""Named registries, and the environment registry that finds environments through adapters.

``Registry`` is a small name -> factory map (a decorator or a direct call registers; ``get``
builds once and caches, ``create`` always builds). ``environment_registry`` maps adapter
names to adapters; an adapter lists and builds its environments. The built-in ``tasks``
adapter (math, multiple_choice, code) is registered on first use, not at import, so
importing this module costs nothing (and probes no third-party library). Stdlib only.

Example:
    >>> from twinkle.core.registry import environment_registry
    >>> "tasks" in environment_registry.list_adapters()
    True
    >>> ("tasks", "math") in environment_registry
    True
    >>> env = environment_registry.get("math", "tasks", limit=5)
    >>> len(env)
    5
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

__all__ = [
    "Adapter",
    "EnvironmentRegistry",
    "Registry",
    "environment_registry",
]

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> factory (or instance) map.

    Example:
        >>> reg = Registry("greeters")
        >>> @reg.register("hello")
        ... class Hello:
        ...     pass
        >>> reg.get("hello") is reg.get("hello"), reg.create("hello") is reg.get("hello")
        (True, False)
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._factories: dict[str, Callable[..., T]] = {}
        self._instances: dict[str, T] = {}

    def register(self, name: str, factory: Callable[..., T] | None = None) -> Any:
        """Register ``factory`` under ``name``; without a factory, return a decorator."""
        if factory is None:

            def decorator(obj: Callable[..., T]) -> Callable[..., T]:
                self.register(name, obj)
                return obj

            return decorator
        if name in self:
            raise ValueError(f"'{name}' already registered in {self.name}")
        self._factories[name] = factory
        return factory

    def register_instance(self, name: str, instance: T) -> None:
        if name in self:
            raise ValueError(f"'{name}' already registered in {self.name}")
        self._instances[name] = instance

    def unregister(self, name: str) -> None:
        self._factories.pop(name, None)
        self._instances.pop(name, None)

    def _missing(self, name: str) -> KeyError:
        return KeyError(f"'{name}' not found. Available: {sorted(self.keys())}")

    def get(self, name: str, **kwargs: Any) -> T:
        """The cached instance for ``name`` (built on first call with ``kwargs``)."""
        if name not in self._instances:
            if name not in self._factories:
                raise self._missing(name)
            self._instances[name] = self._factories[name](**kwargs)
        return self._instances[name]

    def create(self, name: str, **kwargs: Any) -> T:
        """A new instance for ``name``; instance-only entries raise ``KeyError``."""
        if name not in self._factories:
            raise self._missing(name)
        return self._factories[name](**kwargs)

    def keys(self) -> list[str]:
        return list(dict.fromkeys([*self._factories, *self._instances]))

    def __contains__(self, name: object) -> bool:
        return name in self._factories or name in self._instances

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())


@runtime_checkable
class Adapter(Protocol):
    """What ``EnvironmentRegistry`` needs from an adapter.

    Example:
        >>> from twinkle.core.environments.adapter import TaskAdapter
        >>> isinstance(TaskAdapter(), Adapter), isinstance(object(), Adapter)
        (True, False)
    """

    name: str

    def list_environments(self) -> list[str]: ...

    def get_environment(self, name: str, **config: Any) -> Any: ...


class EnvironmentRegistry:
    """Adapters by name, and the environments they offer.

    Example:
        >>> reg = EnvironmentRegistry()
        >>> reg.list_environments("tasks")
        [('tasks', 'code'), ('tasks', 'math'), ('tasks', 'multiple_choice')]
        >>> reg.get("multiple_choice").spec.name       # adapter found by name
        'multiple_choice'
    """

    def __init__(self, *, builtins: bool = True) -> None:
        self._adapters: dict[str, Adapter] = {}
        self._builtins_pending = builtins
        self._lock = threading.Lock()

    def _ensure_builtins(self) -> None:
        if not self._builtins_pending:
            return
        with self._lock:
            if self._builtins_pending:
                self._builtins_pending = False
                from twinkle.core.adapters import builtin_adapters
                from twinkle.core.environments.adapter import TaskAdapter

                self._adapters.setdefault(TaskAdapter.name, TaskAdapter())
                for adapter in builtin_adapters():
                    self._adapters.setdefault(adapter.name, adapter)

    def register_adapter(self, adapter: Adapter) -> Adapter:
        """Add ``adapter`` under ``adapter.name``; a duplicate name raises ``ValueError``."""
        self._ensure_builtins()
        name = getattr(adapter, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError("an adapter needs a non-empty 'name' attribute")
        if not callable(getattr(adapter, "get_environment", None)) or not callable(
            getattr(adapter, "list_environments", None)
        ):
            raise TypeError(
                f"adapter '{name}' must define list_environments() and get_environment()"
            )
        if name in self._adapters:
            raise ValueError(f"adapter '{name}' already registered")
        self._adapters[name] = adapter
        return adapter

    def unregister_adapter(self, name: str) -> None:
        self._ensure_builtins()
        self._adapters.pop(name, None)

    def get_adapter(self, name: str) -> Adapter:
        self._ensure_builtins()
        if name not in self._adapters:
            raise KeyError(f"adapter '{name}' not found. Available: {self.list_adapters()}")
        return self._adapters[name]

    def list_adapters(self) -> list[str]:
        self._ensure_builtins()
        return sorted(self._adapters)

    def list_environments(self, adapter: str | None = None) -> list[tuple[str, str]]:
        """``[(adapter_name, env_name)]``, for one adapter or all of them."""
        names = [adapter] if adapter is not None else self.list_adapters()
        return [(a, env) for a in names for env in self.get_adapter(a).list_environments()]

    def resolve(self, name: str, adapter: str | None = None) -> tuple[str, str]:
        """``(adapter, name)`` for an environment; ``"adapter/name"`` is accepted too.

        Without an adapter, the one adapter that lists ``name`` is used; none or several
        raise ``KeyError``.
        """
        if adapter is None and "/" in name:
            adapter, name = name.split("/", 1)
        if adapter is not None:
            return adapter, name
        owners = [a for a, env in self.list_environments() if env == name]
        if len(owners) != 1:
            problem = "not found" if not owners else f"offered by several adapters {owners}"
            raise KeyError(
                f"environment '{name}' {problem}; pass adapter=. "
                f"Available: {self.list_environments()}"
            )
        return owners[0], name

    def get(self, name: str, adapter: str | None = None, **config: Any) -> Any:
        """A new environment ``name`` from ``adapter``, built with ``config``."""
        adapter, name = self.resolve(name, adapter)
        owner = self.get_adapter(adapter)
        ensure_installed = getattr(owner, "ensure_installed", None)
        if ensure_installed is not None:
            ensure_installed()  # MissingExtraError names the extra before "not found" could
        if name not in owner.list_environments():
            raise KeyError(
                f"environment '{name}' not found in adapter '{adapter}'. "
                f"Available: {owner.list_environments()}"
            )
        return owner.get_environment(name, **config)

    def __contains__(self, item: object) -> bool:
        if not (isinstance(item, tuple) and len(item) == 2):
            return False
        adapter, name = item
        self._ensure_builtins()
        return adapter in self._adapters and name in self._adapters[adapter].list_environments()


#: The process-wide environment registry (built-in ``tasks`` adapter on first use).
environment_registry = EnvironmentRegistry()
