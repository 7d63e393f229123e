"""One exception family for everything Twinkle raises on purpose.

Callers catch by family, as with httpx's exception tree; each class also keeps the standard
base it had before (``ValueError``, ``ImportError``, ``OSError``...), so ``except ValueError``
around a dataset read still works::

    TwinkleError
    ├── MissingExtraError (ImportError)     an optional extra is not installed: names the pip line
    ├── DatasetFormatError (ValueError)     twinkle.io: a file or row that cannot be read/written
    ├── ProtocolError                       twinkle.protocol: a model endpoint failed
    │   └── APICallError (RuntimeError)       one chat call, after its retries
    ├── SandboxError                        twinkle.sandbox: the local sandbox server
    │   ├── IsolationError (RuntimeError)     bubblewrap missing or unable to make namespaces
    │   ├── SetupError (RuntimeError)         a template's setup command failed
    │   ├── InitError (OSError)               the sandbox's init is gone
    │   ├── RpcError                          a Connect (envd) error with its code
    │   └── ThroughSymlink, OutsideSandbox    a path the host-side file code leaves to the
    │                                         sandbox (caught inside the server)
    ├── EnvError                            twinkle.envs / twinkle.container / twinkle.core
    │   ├── EnvironmentFailure                the environment itself died mid-episode (its
    │   │                                     sandbox gone, its server unreachable)
    │   └── ContainerEnvironmentError (RuntimeError)
    └── TrackingError (RuntimeError)        twinkle.tracking: MLflow could not be written

The concrete classes live beside the code that raises them and derive from the bases here;
this module stays import-free so every layer can use it.

Example:
    >>> from twinkle.errors import TwinkleError, MissingExtraError
    >>> err = MissingExtraError('PIIPresidioFilter', 'pii', module='spacy')
    >>> isinstance(err, (TwinkleError, ImportError)), err.extra
    (True, 'pii')
    >>> print(err)
    PIIPresidioFilter needs the 'pii' extra (spacy is missing): pip install 'twinkle[pii]'
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

__all__ = [
    "EnvError",
    "EnvironmentFailure",
    "MissingExtraError",
    "ProtocolError",
    "SandboxError",
    "TrackingError",
    "TwinkleError",
    "require",
]


class TwinkleError(Exception):
    """The base of every error Twinkle raises on purpose.

    Example:
        >>> issubclass(MissingExtraError, TwinkleError)
        True
    """


class MissingExtraError(TwinkleError, ImportError):
    """An optional dependency is missing; the message gives the ``pip install`` line.

    Args:
        feature: what needed it (a class, a command, a parameter).
        extra: the ``twinkle[...]`` extra that installs it, or None for a package outside
            the extras (``package`` is then named instead).
        module: the module that failed to import, for the message.
        package: the pip requirement when ``extra`` is None (e.g. ``"vllm"``).

    Example:
        >>> str(MissingExtraError('EnvPool', 'ray'))
        "EnvPool needs the 'ray' extra: pip install 'twinkle[ray]'"
    """

    def __init__(
        self,
        feature: str,
        extra: str | None = None,
        *,
        module: str | None = None,
        package: str | None = None,
    ) -> None:
        self.feature = feature
        self.extra = extra
        self.module = module
        self.install = f"pip install 'twinkle[{extra}]'" if extra else f"pip install {package}"
        what = f"the '{extra}' extra" if extra else f"the package '{package}'"
        missing = f" ({module} is missing)" if module else ""
        super().__init__(f"{feature} needs {what}{missing}: {self.install}", name=module)


class ProtocolError(TwinkleError):
    """A model endpoint failed (``twinkle.protocol``)."""


class SandboxError(TwinkleError):
    """The local sandbox server or one of its sandboxes failed (``twinkle.sandbox``)."""


class EnvError(TwinkleError):
    """An environment (OpenEnv, container, task environment) failed or answered an error."""


class EnvironmentFailure(EnvError):
    """The environment itself failed mid-episode, not the action: its sandbox is gone or its
    server unreachable. The episode cannot go on, and the failure is no observation for the
    model: tool dispatchers (``ToolManager``) let it through, and a rollout ends the
    trajectory with ``stop_reason='error'`` and ``str(exc)`` (the cause, prefixed by what
    failed: ``SandboxError: ...``) as its ``error``.

    Example:
        >>> str(EnvironmentFailure('SandboxError: sandbox server unreachable'))
        'SandboxError: sandbox server unreachable'
    """


class TrackingError(TwinkleError, RuntimeError):
    """MLflow could not be written (``twinkle.tracking``)."""


def require(module: str, feature: str, extra: str | None = None, **kw: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``extra``.

    Example:
        >>> require('json', 'a doctest').__name__
        'json'
        >>> try:
        ...     require('no_such_mod', 'EnvPool', 'ray')
        ... except MissingExtraError as exc:
        ...     print(exc.install)
        pip install 'twinkle[ray]'
    """
    try:
        return import_module(module)
    except ImportError as exc:
        raise MissingExtraError(feature, extra, module=exc.name or module, **kw) from exc
