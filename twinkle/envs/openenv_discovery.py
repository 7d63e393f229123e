"""How an OpenEnv environment package is found, and how its objects become twinkle's.

Discovery follows the layout OpenEnv packages share (it works for upstream's echo, coding and
openspiel packages and for ``twinkle.envs.openenv_envs``): the Environment class is the concrete
``Environment`` subclass under ``<env>.server`` (``*_environment``/``*_env`` modules first,
app modules never imported), the Action class the first ``Action`` in ``<env>.__all__``
(then ``<env>.models``), the client the first ``EnvClient`` in ``<env>.__all__``.
Translations turn observations into the text a model reads, Action JSON schemas and MCP
tool lists into OpenAI tool schemas, and None rewards into 0.0. ``openenv`` is imported
inside the functions that need it.

Example:
    >>> action_tools({'title': 'GuessAction', 'properties': {'guess': {'type': 'integer'}},
    ...               'required': ['guess']})[0]['function']['name']
    'guess'
    >>> format_observation({'message': 'Higher.', 'reward': None, 'done': False})
    'Higher.'
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import pkgutil
import re
import typing
from collections.abc import Callable, Iterable
from typing import Any

from twinkle.envs.base import (
    ENV_FAILED,
    StepResult,
    format_command_output,
    truncate_observation,
)
from twinkle.errors import require

logger = logging.getLogger("twinkle.envs")
#: Where twinkle's own OpenEnv environments live; ``env_name='number_guess'`` finds them.
BUILTIN_ENVS_PACKAGE = "twinkle.envs.openenv_envs"
#: Server submodules that build an app on import; discovery never imports them.
_APP_MODULES = frozenset({"app", "asgi", "main"})
_TEXT_KEYS = ("result", "output", "content", "text", "message")

ToolInfo = dict[str, Any]


def import_openenv() -> Any:
    """``openenv.core.env_server`` (types, Environment, MCP types), or MissingExtraError."""
    return require("openenv.core.env_server", "the OpenEnv adapter (openenv==0.10.0)", "openenv")


# --- discovery ----------------------------------------------------------------------------


def load_object(spec: Any) -> Any:
    """A class given as itself or as ``'module:Class'`` / ``'module.Class'``."""
    if not isinstance(spec, str):
        return spec
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"expected 'module:Class' or 'module.Class', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.partition(".")[0]
        raise ModuleNotFoundError(
            f"Cannot import module {module_name!r}: install it, e.g. an OpenEnv environment "
            f"package from OpenEnv's source tree ({install_hint(top)}), or put it on PYTHONPATH",
            name=exc.name,
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"module {module_name!r} has no attribute {attr!r}") from None


def import_env_package(env_name: str) -> Any:
    """The environment package: ``env_name`` itself, else twinkle's own of that name."""
    try:
        return importlib.import_module(env_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not env_name.startswith(exc.name):
            raise  # the package exists but one of its own imports is missing
        if "." not in env_name:
            try:
                return importlib.import_module(f"{BUILTIN_ENVS_PACKAGE}.{env_name}")
            except ModuleNotFoundError as inner:
                if inner.name is None or not f"{BUILTIN_ENVS_PACKAGE}.{env_name}".startswith(
                    inner.name
                ):
                    raise
        raise ModuleNotFoundError(
            f"OpenEnv environment package {env_name!r} is not installed: {install_hint(env_name)}"
            f" (it is not on PyPI), pass env_cls, or use a bundled env such as 'number_guess'",
            name=exc.name,
        ) from exc


def install_hint(env_name: str) -> str:
    """The pip line for an upstream OpenEnv environment package (``envs/<name>`` in its repo)."""
    return f"pip install -e <OpenEnv checkout>/envs/{env_name}"


def _classes(module: Any, names: Iterable[str]) -> list[type]:
    return [obj for obj in (getattr(module, n, None) for n in names) if inspect.isclass(obj)]


def find_action_cls(package: Any) -> type | None:
    """The first ``Action`` subclass in the package's ``__all__``, then in its ``models``."""
    base = import_openenv().Action
    candidates = _classes(package, getattr(package, "__all__", []))
    try:
        models = importlib.import_module(f"{package.__name__}.models")
        candidates += [
            c for c in _classes(models, dir(models)) if c.__module__.startswith(package.__name__)
        ]
    except ModuleNotFoundError as exc:
        if exc.name != f"{package.__name__}.models":
            raise
    return next((c for c in candidates if issubclass(c, base) and c is not base), None)


def action_cls_of(cls: type) -> type | None:
    """The Action type parameter of ``Environment[Act, ...]`` or ``EnvClient[Act, ...]``."""
    base = import_openenv().Action
    for klass in cls.__mro__:
        for generic in getattr(klass, "__orig_bases__", ()):
            for arg in typing.get_args(generic):
                if inspect.isclass(arg) and issubclass(arg, base) and arg is not base:
                    return arg
    return None


def find_environment_cls(package: Any) -> type:
    """The concrete ``Environment`` subclass defined under ``<package>.server``.

    Modules named ``*_environment`` / ``*_env`` are searched first; app modules are skipped
    (they build a server on import and hide the real import errors).
    """
    server_api = import_openenv()
    try:
        server = importlib.import_module(f"{package.__name__}.server")
    except ImportError as exc:
        raise ImportError(
            f"{package.__name__!r} has no importable 'server' package: {exc}"
        ) from exc
    names = sorted(
        (
            m.name
            for m in pkgutil.iter_modules(getattr(server, "__path__", []))
            if m.name not in _APP_MODULES
        ),
        key=lambda n: not n.endswith(("_environment", "_env")),
    )
    modules = [server] + [importlib.import_module(f"{server.__name__}.{n}") for n in names]
    for module in modules:
        for cls in _classes(module, dir(module)):
            if (
                issubclass(cls, server_api.Environment)
                and not inspect.isabstract(cls)
                and cls.__module__.startswith(package.__name__ + ".")
            ):
                return cls
    raise ImportError(f"no Environment subclass found under {server.__name__!r}; pass env_cls")


def find_client_cls(package: Any) -> type | None:
    """The first ``EnvClient`` subclass in the package's ``__all__`` (None: use the generic)."""
    from openenv.core.env_client import EnvClient

    return next(
        (
            c
            for c in _classes(package, getattr(package, "__all__", []))
            if issubclass(c, EnvClient) and c is not EnvClient
        ),
        None,
    )


# --- shared translations ------------------------------------------------------------------


def reward_value(value: Any) -> float:
    """OpenEnv rewards may be None, bool or numbers; None means no signal, i.e. 0.0."""
    return 0.0 if value is None else float(value)


def format_observation(obs: Any) -> str:
    """The text a model reads for an OpenEnv observation (pydantic model or dict)."""
    if obs is None:
        return ""
    if isinstance(obs, str):
        return obs
    if hasattr(obs, "model_dump"):
        data = obs.model_dump(exclude={"reward", "done", "metadata"})
    elif isinstance(obs, dict):
        data = {k: v for k, v in obs.items() if k not in ("reward", "done", "metadata")}
    else:
        return truncate_observation(str(obs))
    error = data.get("error")
    if error:  # MCP CallToolObservation
        message = error.get("message") if isinstance(error, dict) else str(error)
        return f"Error: {message}"
    if "stdout" in data and "exit_code" in data:  # code environments
        return format_command_output(
            data.get("stdout") or "", data.get("stderr") or "", int(data.get("exit_code") or 0)
        )
    for key in _TEXT_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, dict) and "data" in value:  # MCP tool result
            value = value["data"]
        if isinstance(value, str):
            return truncate_observation(value)
        return truncate_observation(json.dumps(value, ensure_ascii=False, default=str))
    return truncate_observation(json.dumps(data, ensure_ascii=False, default=str))


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def action_tools(action_schema: dict[str, Any], name: str | None = None) -> list[ToolInfo]:
    """One OpenAI tool from an Action's JSON schema (``GuessAction`` -> ``guess``)."""
    title = str(action_schema.get("title") or "env_action")
    props = {k: v for k, v in (action_schema.get("properties") or {}).items() if k != "metadata"}
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": [r for r in action_schema.get("required", []) if r in props],
    }
    if "$defs" in action_schema:
        parameters["$defs"] = action_schema["$defs"]
    tool_name = name or _snake(title.removesuffix("Action")) or "env_action"
    description = action_schema.get("description") or f"Send a {title} to the environment."
    return [
        {
            "type": "function",
            "function": {"name": tool_name, "description": description, "parameters": parameters},
        }
    ]


def mcp_tools(tools: Iterable[Any]) -> list[ToolInfo]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description or "",
                "parameters": t.input_schema or {"type": "object", "properties": {}},
            },
        }
        for t in tools
    ]


def tool_names(tools: Iterable[ToolInfo]) -> set[str]:
    return {
        t["function"]["name"]
        for t in tools
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    }


def describe_error(exc: Exception) -> str:
    """A short message for the model; pydantic errors without their documentation links."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'action'}: {e['msg']}" for e in exc.errors()
        )
    return f"{type(exc).__name__}: {exc}"


def error_result(
    message: str, episode_reward: float, done: bool, error: str | None = None
) -> StepResult:
    """``Error: <message>`` as a step's observation. With ``done`` and an ``error`` the env
    itself broke (a lost session, a dead actor, an exception inside it): ``info[ENV_FAILED]``
    then says so, and the rollout ends the episode as an error rather than scoring it."""
    info: dict[str, Any] = {"episode_reward": episode_reward}
    if error is not None:
        info["error"] = error
        if done:
            info[ENV_FAILED] = f"OpenEnvError: {message}"
    return StepResult(observation=f"Error: {message}", reward=0.0, done=done, info=info)


def accepted_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` minus those ``fn`` cannot take (all of them when it has ``**kwargs``)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    dropped = set(kwargs) - set(params)
    if dropped:
        logger.warning("reset does not take %s; ignored", sorted(dropped))
    return {k: v for k, v in kwargs.items() if k in params}
