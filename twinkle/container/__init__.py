"""Environments in another process or machine: an HTTP server for any environment and its client.

``twinkle env serve-functional NAME`` (or :func:`serve` / :class:`EnvironmentServer`) serves a
registered environment; :class:`ContainerEnvironment` is the matching client and behaves like
the environment itself. FastAPI and httpx are imported only when a server or client is built.

Example:
    >>> from twinkle.container import ContainerEnvironment, EnvironmentServer
    >>> from twinkle.core.registry import environment_registry
    >>> with EnvironmentServer(environment_registry.get("multiple_choice")) as server:
    ...     len(ContainerEnvironment(server.url))
    20
"""

from twinkle.container.client import ContainerEnvironment, ContainerEnvironmentError
from twinkle.container.serialization import OpaqueHidden
from twinkle.container.server import EnvironmentServer, create_app, serve

__all__ = [
    "ContainerEnvironment",
    "ContainerEnvironmentError",
    "EnvironmentServer",
    "OpaqueHidden",
    "create_app",
    "serve",
]
