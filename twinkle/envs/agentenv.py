"""``AgentEnv``: one fresh sandbox per episode, through the real ``e2b`` SDK.

The same code drives an AgentENV deployment (Firecracker microVMs), E2B itself, or the local
bubblewrap server in :mod:`twinkle.sandbox`; only ``api_url`` changes. The SDK is imported
on first use, so ``import twinkle.envs`` stays light; install it with ``pip install
'twinkle[sandbox]'``.

Connection settings are explicit arguments first, then the SDK's environment variables:
``api_url`` (``E2B_API_URL``), ``api_key`` (``E2B_API_KEY``, default ``'local'``) and the
sandbox URL, which defaults to ``api_url``. The SDK itself would send all in-sandbox traffic
(with its access token) to E2B's public cloud when only ``api_url`` is set; defaulting the
sandbox URL to ``api_url`` keeps it on the configured server. Set ``E2B_DOMAIN`` (and no
``api_url``) to use a domain-routed E2B deployment instead.

Errors: ``step`` never raises. A failing tool answers ``Error: ...`` with ``done=False``, so
the model can react and the rollout carries on (bounded by its ``max_turns``); a non-zero
exit code is not an error but part of the observation. A failure of the sandbox itself (it is
gone, or its server unreachable) is no mistake of the model's: that step comes back with
``done=True`` and ``info[ENV_FAILED]`` set to the cause (``'SandboxError: ...'``), which
``EnvTool`` raises as ``twinkle.errors.EnvironmentFailure``, so that a rollout ends the
trajectory as an error instead of showing the model the failure as a tool result.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from typing import Any

from twinkle.envs.base import (
    ENV_FAILED,
    MAX_OBSERVATION_CHARS,
    TIMEOUT_EXIT_CODE,
    Env,
    StepResult,
    format_command_output,
    truncate_observation,
)
from twinkle.errors import require

Handler = Callable[["AgentEnv", dict[str, Any]], str]

#: The built-in tools (OpenAI function schemas), in the order ``tools()`` lists them.
DEFAULT_TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a bash command in the sandbox; returns stdout, stderr, exit code.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command to run."},
                    "cwd": {
                        "type": "string",
                        "description": "Working directory (default: /home/user).",
                    },
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file from the sandbox.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Absolute path, or relative to /home/user.",
                    }
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Create or overwrite a file in the sandbox (and its parent dirs).",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Absolute path, or relative to /home/user.",
                    },
                    "content": {
                        "type": "string",
                        "description": "The full new content of the file.",
                    },
                },
                "required": ["path", "content"],
            },
        },
    },
]


#: A step renews its sandbox's lifetime once this share of it has passed since the last renewal.
_RENEW_AFTER = 0.1

#: A command printing more than this is killed (its observation shows only the first 32K).
_FLOOD_CHARS = 8 * MAX_OBSERVATION_CHARS


# Each stream keeps a little less than the observation limit, so that the truncation note,
# the other stream's tail and the exit code still fit in the observation.
_STREAM_CHARS = MAX_OBSERVATION_CHARS - 2048


class _Output:
    """The first ``_STREAM_CHARS`` characters of a stream, and how many were dropped."""

    __slots__ = ("dropped", "flooded", "kept", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0
        self.flooded = False

    def add(self, chunk: str) -> None:
        room = max(_STREAM_CHARS - self.kept, 0)
        if room:
            self.parts.append(chunk[:room])
            self.kept += min(len(chunk), room)
        self.dropped += max(len(chunk) - room, 0)

    def text(self, note: str = "") -> str:
        text = "".join(self.parts)
        if self.dropped:
            text = text.rstrip("\n") + f"\n... [truncated {self.dropped} characters]"
        if not note:
            return text
        return text.rstrip("\n") + "\n" + note if text else note


def _import_e2b() -> Any:
    return require("e2b", "AgentEnv", "sandbox")


def is_environment_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the sandbox itself failed (gone, unreachable, unresponsive) rather
    than the tool call (a missing file, a bad path)."""
    import httpx

    e2b = _import_e2b()
    return isinstance(
        exc,
        (
            e2b.SandboxNotRunningException,
            e2b.SandboxUnreachableException,
            e2b.SandboxNotFoundException,
            e2b.GuestUnresponsiveException,
            e2b.AuthenticationException,
            httpx.TransportError,
            ConnectionError,
        ),
    )


def _is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the sandbox (or its server) did not answer at all."""
    import httpx

    e2b = _import_e2b()
    return isinstance(exc, (e2b.SandboxUnreachableException, httpx.TransportError, ConnectionError))


def _env_failure(observation: str, error: str, cause: str) -> StepResult:
    return StepResult(
        observation=truncate_observation(observation),
        done=True,
        info={"error": error, ENV_FAILED: f"SandboxError: {cause}"},
    )


def _tool_name(tool_info: dict[str, Any]) -> str:
    name = (tool_info.get("function") or {}).get("name") if isinstance(tool_info, dict) else None
    if not name or not isinstance(name, str):
        raise ValueError(
            f"tool_info must be an OpenAI function schema with function.name, got {tool_info!r}"
        )
    return name


class AgentEnv(Env):
    """An ``Env`` over E2B-compatible sandboxes (AgentENV, E2B, or ``twinkle sandbox serve``).

    ``reset()`` creates a fresh sandbox (killing the previous one) and runs the setup
    commands; ``step(tool, arguments)`` runs a tool in it; ``close()`` kills it.

    Args:
        template: the sandbox template (built with ``aenv pull ... --name <template>`` on
            AgentENV; ``base`` on E2B and the local server).
        api_url: control-plane URL; falls back to ``E2B_API_URL`` (unset: E2B's cloud).
        api_key: API key; falls back to ``E2B_API_KEY``, then ``'local'``.
        sandbox_url: in-sandbox (envd) URL; falls back to ``E2B_SANDBOX_URL``, then to
            ``api_url`` unless ``E2B_DOMAIN`` names a domain-routed deployment.
        sandbox_timeout: sandbox lifetime in seconds; must outlast an episode. With
            ``refresh_timeout``, a step renews it once a tenth of it has passed since the
            last renewal, so every step starts with at least 90% of it left.
        command_timeout: the most seconds one ``run_command`` may take (then exit code 124).
        setup_commands: shell commands run after each ``reset``; their output is the
            reset observation.
        sandbox_envs: environment variables of every command in the sandbox.
        metadata: sandbox metadata (shown by ``Sandbox.list``).
        refresh_timeout: renew the sandbox lifetime as steps go (best effort).
        include_default_tools: offer ``run_command``, ``read_file`` and ``write_file``.
        request_timeout: seconds to wait for one control-plane or file request.

    Example::

        env = AgentEnv(template='base', api_url='http://127.0.0.1:49983')
        env.reset()                                   # a fresh sandbox
        env.step('run_command', {'command': 'python -c "print(1 + 1)"'}).observation  # '2'
        env.close()                                   # kills it
    """

    def __init__(
        self,
        template: str,
        api_url: str | None = None,
        api_key: str | None = None,
        sandbox_timeout: int = 300,
        command_timeout: float = 120,
        setup_commands: list[str] | None = None,
        sandbox_envs: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
        refresh_timeout: bool = True,
        include_default_tools: bool = True,
        sandbox_url: str | None = None,
        request_timeout: float = 30,
    ) -> None:
        if not template or not isinstance(template, str):
            raise ValueError(f"template must be a non-empty string, got {template!r}")
        if sandbox_timeout <= 0 or command_timeout <= 0 or request_timeout <= 0:
            raise ValueError(
                "sandbox_timeout, command_timeout and request_timeout must be positive, got "
                f"{sandbox_timeout!r}, {command_timeout!r}, {request_timeout!r}"
            )
        self.template = template
        self.api_url = api_url or os.environ.get("E2B_API_URL") or None
        self.api_key = api_key or os.environ.get("E2B_API_KEY") or "local"
        default_sandbox_url = self.api_url if not os.environ.get("E2B_DOMAIN") else None
        self.sandbox_url = sandbox_url or os.environ.get("E2B_SANDBOX_URL") or default_sandbox_url
        self.sandbox_timeout = int(sandbox_timeout)
        self.command_timeout = command_timeout
        self.setup_commands = list(setup_commands or [])
        self.sandbox_envs = dict(sandbox_envs or {})
        self.metadata = dict(metadata or {})
        self.refresh_timeout = refresh_timeout
        self.include_default_tools = include_default_tools
        self.request_timeout = request_timeout
        self._sandbox: Any = None
        self._renewed_at = 0.0  # time.monotonic() of the sandbox's creation or last renewal
        self._handlers: dict[str, Handler] = {}
        self._schemas: dict[str, dict[str, Any]] = {}
        self._defaults: dict[str, Handler] = {
            "run_command": AgentEnv.run_command,
            "read_file": AgentEnv.read_file,
            "write_file": AgentEnv.write_file,
        }

    # -- connection ----------------------------------------------------------------------
    def _connection(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"api_key": self.api_key, "request_timeout": self.request_timeout}
        if self.api_url:
            opts["api_url"] = self.api_url
        if self.sandbox_url:
            opts["sandbox_url"] = self.sandbox_url
        return opts

    @property
    def sandbox(self) -> Any:
        """The underlying ``e2b.Sandbox`` (PTY, file watching, ...), or None before ``reset``."""
        return self._sandbox

    @property
    def sandbox_id(self) -> str | None:
        """The current sandbox's id, or None."""
        return self._sandbox.sandbox_id if self._sandbox is not None else None

    # -- tools ---------------------------------------------------------------------------
    def register_tool(self, tool_info: dict[str, Any], handler: Handler) -> AgentEnv:
        """Add (or replace) a tool answered by ``handler(env, arguments) -> str``; returns self.

        A name equal to a built-in tool's overrides the built-in.
        """
        name = _tool_name(tool_info)
        if not callable(handler):
            raise ValueError(f"handler for tool {name!r} must be callable")
        self._handlers[name] = handler
        self._schemas[name] = tool_info
        return self

    def register_command_tool(self, tool_info: dict[str, Any], command_template: str) -> AgentEnv:
        """Add a tool that runs ``command_template`` formatted with its arguments; returns self.

        Each argument is shell-quoted (``shlex.quote``) before it is substituted, so
        ``'pytest {test_file}'`` with ``test_file="x.py; rm -rf ~"`` runs pytest on one
        oddly named file. Write placeholders unquoted in the template for that reason, and
        double literal braces (``awk '{{print $1}}'``), as ``str.format`` requires.
        """
        name = _tool_name(tool_info)

        def run(env: AgentEnv, arguments: dict[str, Any]) -> str:
            quoted = {
                k: shlex.quote(v if isinstance(v, str) else json.dumps(v))
                for k, v in arguments.items()
            }
            try:
                command = command_template.format(**quoted)
            except KeyError as exc:
                return f"Error: missing required argument {exc} for this tool."
            except (IndexError, ValueError) as exc:
                return f"Error: cannot build the command for tool {name!r}: {exc}"
            return env.run_command({"command": command})

        return self.register_tool(tool_info, run)

    def tools(self) -> list[dict[str, Any]]:
        """The tool schemas the model sees: registered tools, then the unshadowed built-ins."""
        out = list(self._schemas.values())
        if self.include_default_tools:
            out += [s for s in DEFAULT_TOOL_SCHEMAS if s["function"]["name"] not in self._schemas]
        return out

    # -- episode -------------------------------------------------------------------------
    def reset(self, trajectory: dict[str, Any] | None = None) -> StepResult:
        """Kill the previous sandbox, create a fresh one and run the setup commands."""
        e2b = _import_e2b()
        self.close()
        self._sandbox = e2b.Sandbox.create(
            template=self.template,
            timeout=self.sandbox_timeout,
            envs=self.sandbox_envs or None,
            metadata=self.metadata or None,
            **self._connection(),
        )
        self._renewed_at = time.monotonic()
        outputs = [self.run_command({"command": command}) for command in self.setup_commands]
        return StepResult(observation="\n".join(outputs), info={"sandbox_id": self.sandbox_id})

    def step(self, tool_name: str, arguments: dict[str, Any] | str | None = None) -> StepResult:
        """Run one tool call. Never raises: failures come back as ``Error: ...`` observations,
        and a failure of the sandbox itself with ``done=True`` and ``info[ENV_FAILED]``."""
        if self._sandbox is None:
            return StepResult(
                observation="Error: sandbox not initialized, call reset() first.",
                done=True,
                info={"error": "no_sandbox"},
            )
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
            if not isinstance(args, dict):
                raise ValueError(f"arguments must be a JSON object, got {type(args).__name__}")
        except (ValueError, TypeError) as exc:
            return StepResult(
                observation=f"Error: invalid arguments for {tool_name!r}: {exc}",
                info={"error": "bad_arguments"},
            )
        handler = self._handlers.get(tool_name)
        if handler is None and self.include_default_tools:
            handler = self._defaults.get(tool_name)
        if handler is None:
            available = [s["function"]["name"] for s in self.tools()]
            return StepResult(
                observation=f"Error: unknown tool {tool_name!r}. Available tools: {available}",
                info={"error": "unknown_tool"},
            )
        if self.refresh_timeout and (gone := self._renew_if_due()) is not None:
            return _env_failure(f"Error: {gone}", "sandbox_unavailable", gone)
        try:
            observation = handler(self, args)
        except Exception as exc:  # noqa: BLE001 - a failed tool call is the model's observation
            message = str(exc) or type(exc).__name__
            if is_environment_failure(exc):
                cause = f"{type(exc).__name__}: {message}"
                if _is_unreachable(exc):  # say it first: the SDK's text is about a request
                    cause = f"sandbox unreachable: {cause}"
                return _env_failure(f"Error: {message}", type(exc).__name__, cause)
            return StepResult(
                observation=truncate_observation(f"Error: {message}"),
                info={"error": type(exc).__name__},
            )
        return StepResult(observation=truncate_observation(str(observation)))

    def _renew_if_due(self) -> str | None:
        """``_refresh`` once a tenth of the lifetime has passed since the last renewal.

        Renewing on every step cost a control-plane round trip per tool call, to move the
        deadline by seconds. A step on a sandbox that died in between finds out from its own
        request instead.
        """
        if time.monotonic() - self._renewed_at < self.sandbox_timeout * _RENEW_AFTER:
            return None
        return self._refresh()

    def _refresh(self) -> str | None:
        """Renew the sandbox lifetime; a reason if the sandbox or its server is gone, else None.

        Answering a dead sandbox here saves the tool call its own round of connection retries.
        Other failures (say, a server without the timeout route) are ignored: renewal is a
        convenience, not a requirement.
        """
        e2b = _import_e2b()
        try:
            self._sandbox.set_timeout(self.sandbox_timeout, request_timeout=self.request_timeout)
            self._renewed_at = time.monotonic()
        except e2b.NotFoundException as exc:
            return (
                f"sandbox {self.sandbox_id} is no longer running ({exc}); reset() starts a new one."
            )
        except Exception as exc:  # noqa: BLE001 - renewal is a convenience; other failures ignored
            import httpx

            if isinstance(exc, (httpx.TransportError, OSError)) or is_environment_failure(exc):
                return f"sandbox server unreachable: {exc}"
        return None

    # -- built-in tools (public, so custom handlers can reuse them) ----------------------
    def run_command(self, arguments: dict[str, Any]) -> str:
        """Run ``arguments['command']`` (optional ``cwd``); a non-zero exit is not an error.

        Output is kept up to the observation limit as it streams in, and a command that keeps
        flooding output past ``_FLOOD_CHARS`` is killed, so ``yes`` cannot fill the memory.
        """
        command = arguments.get("command")
        if not command or not isinstance(command, str):
            return "Error: 'command' argument is required."
        e2b = _import_e2b()
        out, err = _Output(), _Output()
        handle: Any = None

        def collect(stream: _Output) -> Callable[[str], None]:
            def add(chunk: str) -> None:
                stream.add(chunk)
                if out.dropped + err.dropped > _FLOOD_CHARS and not err.flooded:
                    err.flooded = True
                    handle.kill()

            return add

        try:
            handle = self._sandbox.commands.run(
                command,
                cwd=arguments.get("cwd") or None,
                timeout=self.command_timeout,
                background=True,
                retain_output=False,
            )
            code = handle.wait(on_stdout=collect(out), on_stderr=collect(err)).exit_code
        except e2b.CommandExitException as exc:
            code = exc.exit_code
        except e2b.TimeoutException as exc:
            # The SDK files "sandbox gone" and "sandbox unreachable" under TimeoutException too;
            # those are errors of the environment, not a slow command.
            if isinstance(exc, (e2b.SandboxNotRunningException, e2b.SandboxUnreachableException)):
                raise
            note = f"command timed out after {self.command_timeout:g}s"
            return format_command_output(out.text(), err.text(note), TIMEOUT_EXIT_CODE)
        if err.flooded:
            note = f"[output limit exceeded: command killed after {_FLOOD_CHARS} characters]"
            return format_command_output(out.text(), err.text(note), code)
        return format_command_output(out.text(), err.text(), code)

    def read_file(self, arguments: dict[str, Any]) -> str:
        """The file's text (truncated to 32K characters)."""
        path = arguments.get("path")
        if not path or not isinstance(path, str):
            return "Error: 'path' argument is required."
        content = self._sandbox.files.read(path, request_timeout=self.request_timeout)
        return truncate_observation(content)

    def write_file(self, arguments: dict[str, Any]) -> str:
        """Create or overwrite the file; answers ``File written: <path>``."""
        path, content = arguments.get("path"), arguments.get("content")
        if not path or not isinstance(path, str):
            return "Error: 'path' argument is required."
        if not isinstance(content, str):
            return "Error: 'content' argument must be a string."
        self._sandbox.files.write(path, content, request_timeout=self.request_timeout)
        return f"File written: {path}"

    def close(self) -> None:
        """Kill the sandbox; safe to call twice, and after the server has gone."""
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            try:
                sandbox.kill(request_timeout=self.request_timeout)
            except Exception:  # noqa: BLE001 - it may already be gone (timeout, server restart)
                pass
