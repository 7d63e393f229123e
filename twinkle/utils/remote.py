"""``@remote_class``: a class that runs in-process, or as a Ray actor through ``Cls.remote(...)``.

The decorator returns the same class (subclasses inherit the behaviour) with one addition, a
``remote`` constructor: ``Cls(...)`` builds a plain local object and needs no Ray, while
``Cls.remote(...)`` imports Ray (only then), starts a local Ray runtime when none is running,
as Ray's own libraries do, and returns an actor handle. Methods are then called Ray's way,
``ray.get(actor.method.remote(...))``. Ray missing raises ``MissingExtraError`` naming the
``ray`` extra.

Example:
    >>> @remote_class()
    ... class Counter:
    ...     def __init__(self, start=0):
    ...         self.n = start
    ...     def inc(self):
    ...         self.n += 1
    ...         return self.n
    >>> Counter(1).inc()  # local: a plain object
    2
    >>> import ray  # doctest: +SKIP
    >>> ray.get(Counter.remote(1).inc.remote())  # doctest: +SKIP
    2
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from twinkle.errors import require

__all__ = ["ensure_ray", "remote_class"]

T = TypeVar("T", bound=type)


def ensure_ray(feature: str) -> ModuleType:
    """The ``ray`` module with a runtime to use: ``ray.init()`` (quietly) when none is running.

    A cluster is joined the usual way: call ``ray.init(address=...)`` first, or set
    ``RAY_ADDRESS``. Raises ``MissingExtraError`` naming ``feature`` when Ray is missing.
    """
    ray = require("ray", feature, "ray")
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, logging_level=logging.WARNING)
    return ray


class _RemoteConstructor:
    """``Cls.remote(...)``: build ``Cls`` as a Ray actor with the decorator's actor options.

    Hidden from the class Ray derives for the actor (it has ``__ray_actor_class__``), so that
    Ray's own ``ActorClass.remote`` is not shadowed.
    """

    def __init__(self, actor_options: dict[str, Any]) -> None:
        self.actor_options = actor_options

    def __get__(self, obj: Any, owner: type) -> Callable[..., Any]:
        if any("__ray_actor_class__" in vars(klass) for klass in owner.__mro__):
            raise AttributeError("remote")
        options = self.actor_options

        def remote(*args: Any, **kwargs: Any) -> Any:
            ray = ensure_ray(f"{owner.__name__}.remote (a Ray actor)")
            actor_cls = ray.remote(**options)(owner) if options else ray.remote(owner)
            return actor_cls.remote(*args, **kwargs)

        remote.__doc__ = f"Build {owner.__name__}(*args, **kwargs) as a Ray actor."
        return remote


def remote_class(**actor_options: Any) -> Callable[[T], T]:
    """Give the decorated class a ``remote(...)`` constructor that builds it as a Ray actor.

    Args:
        actor_options: options for ``ray.remote`` (``num_cpus``, ``num_gpus``, ``resources``...);
            none by default, so Ray's defaults apply.

    Example:
        >>> @remote_class(num_cpus=0)
        ... class Echo:
        ...     def __call__(self, x):
        ...         return x
        >>> Echo()(3), callable(Echo.remote)
        (3, True)
    """

    def decorate(cls: T) -> T:
        cls.remote = _RemoteConstructor(dict(actor_options))  # type: ignore[attr-defined]
        return cls

    return decorate
