"""The ``Rollout`` contract and what both rollouts share: input checks, stop reasons, the
per-turn log, and (re-exported from ``twinkle.utils.aio``) running a coroutine from
synchronous code.

Stop reasons (``stop_reason`` on every output trajectory), the same in both rollouts:

=================  ==================================================================  =========
reason             meaning                                                             truncated
=================  ==================================================================  =========
``stop``           the model answered without tool calls (natural end)                 False
``length``         the model hit its token limit, or ``max_trajectory_tokens`` was     True
                   reached
``max_turns``      the model still wanted tools after ``max_turns`` turns; those       True
                   calls are not executed
``api_error``      the model call failed after its retries, or a tool raised (a        True
                   ``ToolManager`` never raises; other callables may)
``invalid_input``  the trajectory was malformed (no messages, unknown roles...)        False
``abort``          passed through from a sampler that aborted the request              True
``error``          the environment behind a tool died (``EnvironmentFailure``: its     True
                   sandbox gone, its server unreachable), the sampler failed, or an
                   unexpected internal error
=================  ==================================================================  =========

When something failed, ``error`` holds ``"<ExcType>: <message>"``.

Per-turn log (``turn_log`` on every output trajectory; MLflow tracing turns each entry into
an LLM or TOOL span). Entries are plain dicts, in the order things happened::

    {'type': 'llm', 'turn': 1,            # one model call (1-based turn)
     'start_ns': 1764471234000000000,     # wall clock (time.time_ns()) when the call began
     'latency_s': 0.052,                  # seconds until the reply (retries included)
     'prompt_tokens': 812,                # from the server's usage / the prompt length; or None
     'completion_tokens': 40,             # or None
     'finish_reason': 'tool_calls',       # as reported; None when the call failed
     'attempts': 1,                       # HTTP attempts (API rollout) / 1 (sampler)
     'error': None}                       # '<ExcType>: <message>' when the call failed
    {'type': 'tool', 'turn': 1,           # one tool call
     'name': 'get_weather',               # None when the model gave no name
     'arguments': '{"city": "Oslo"}',     # as the model sent them (a JSON string)
     'tool_call_id': 'call_1_0',
     'start_ns': 1764471234060000000, 'latency_s': 0.003,
     'error': False,                      # True when the result is an 'Error: ...' string,
                                          # the tool raised, or it timed out
     'output_chars': 27}

``MultiTurnRollout`` samples a whole batch in one call; its ``llm`` entries carry the
batch's latency and add ``'batch_size'``.

Example:
    >>> class Nothing(Rollout):
    ...     def __call__(self, trajectories, **kwargs):
    ...         return [dict(t, turns=0, stop_reason='stop', truncated=False)
    ...                 for t in check_batch(trajectories)]
    >>> Nothing()([{'messages': [{'role': 'user', 'content': 'hi'}]}])[0]['stop_reason']
    'stop'
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from twinkle.data_format import Trajectory
from twinkle.utils.aio import run_sync as run_sync  # re-exported: rollouts import it here

#: The collector's first-generation threshold while a rollout runs (CPython's default: 700).
ROLLOUT_GC_THRESHOLD = 20_000

STOP_REASONS = ("stop", "length", "max_turns", "api_error", "invalid_input", "abort", "error")
VALID_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})


class Rollout(ABC):
    """A rollout takes trajectories and returns as many, in order, with rollout fields added.

    Example:
        >>> class Echo(Rollout):
        ...     def __call__(self, trajectories, **kwargs):
        ...         return [dict(t, turns=0) for t in trajectories]
        >>> Echo()([{'messages': []}])
        [{'messages': [], 'turns': 0}]
    """

    @abstractmethod
    def __call__(self, trajectories: list[Trajectory], **kwargs: Any) -> list[Trajectory]:
        raise NotImplementedError()


def check_batch(trajectories: Any) -> list[Any]:
    """The batch as a list; a single trajectory or a non-list raises TypeError."""
    if isinstance(trajectories, dict):
        raise TypeError(
            "rollout expects a List[Trajectory]; wrap a single trajectory as [trajectory]."
        )
    if not isinstance(trajectories, (list, tuple)):
        raise TypeError(f"rollout expects a List[Trajectory], got {type(trajectories).__name__}")
    return list(trajectories)


def resolve_tool_managers(tool_manager: Any, n: int) -> list[Any]:
    """One tool manager per trajectory, from a single manager or a list aligned 1:1."""
    if tool_manager is None:
        raise ValueError(
            "tool_manager is required but was not provided; pass it to the "
            "constructor or the call (one manager, or a list aligned with the trajectories)."
        )
    if isinstance(tool_manager, (list, tuple)):
        if len(tool_manager) != n:
            raise ValueError(
                f"per-call tool_manager list length ({len(tool_manager)}) does not match "
                f"number of trajectories ({n})"
            )
        return list(tool_manager)
    return [tool_manager] * n


def input_problem(trajectory: Any) -> str | None:
    """Why ``trajectory`` cannot be rolled out, or None when it is well formed."""
    if not isinstance(trajectory, dict):
        return f"trajectory must be a dict, got {type(trajectory).__name__}"
    messages = trajectory.get("messages")
    if not isinstance(messages, list) or not messages:
        return "trajectory has no messages"
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"message {i} is a {type(message).__name__}, not a dict"
        if message.get("role") not in VALID_ROLES:
            allowed = sorted(VALID_ROLES)
            return f"message {i} has role {message.get('role')!r}; expected one of {allowed}"
    tools = trajectory.get("tools")
    if tools is not None and not isinstance(tools, list):
        return f"'tools' must be a list, got {type(tools).__name__}"
    return None


def invalid_output(trajectory: Any, problem: str) -> Trajectory:
    """The output for a trajectory that could not be rolled out."""
    base = dict(trajectory) if isinstance(trajectory, dict) else {}
    messages = base.get("messages")
    base.update(
        messages=list(messages) if isinstance(messages, list) else [],
        turns=0,
        stop_reason="invalid_input",
        truncated=False,
        error=f"InvalidTrajectory: {problem}",
        turn_log=[],
    )
    return base


def blocking_call(manager: Any, call: Any) -> bool:
    """Whether a tool call must run in a worker thread: yes, unless the manager says it
    cannot block."""
    check = getattr(manager, "is_blocking", None)
    return True if check is None else bool(check(call))


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def endpoint_label(url: str | None) -> str:
    """``url`` fit for a message or a log: a password in it replaced by ``***``.

    Example:
        >>> endpoint_label('http://user:secret@host:8000/v1')
        'http://user:***@host:8000/v1'
    """
    if not url:
        return ""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.netloc.rsplit('@', 1)[1]}"
    return urlunsplit(parts._replace(netloc=netloc))


def llm_entry(
    turn: int,
    start_ns: int,
    started: float,
    *,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    finish_reason: str | None = None,
    attempts: int = 1,
    error: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``turn_log`` entry for one model call (see the module docstring)."""
    entry = {
        "type": "llm",
        "turn": turn,
        "start_ns": start_ns,
        "latency_s": time.perf_counter() - started,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "finish_reason": finish_reason,
        "attempts": attempts,
        "error": error,
    }
    if extra:
        entry.update(extra)
    return entry


def tool_entry(
    turn: int, call: Any, call_id: str, start_ns: int, started: float, result: str, error: bool
) -> dict[str, Any]:
    """A ``turn_log`` entry for one tool call (see the module docstring)."""
    function = call.get("function") if isinstance(call, dict) else None
    function = function if isinstance(function, dict) else {}
    arguments = function.get("arguments")
    if arguments is not None and type(arguments) is not str:
        import json

        arguments = json.dumps(arguments, ensure_ascii=False, default=str)
    name = function.get("name")
    return {
        "type": "tool",
        "turn": turn,
        "name": name if isinstance(name, str) else None,
        "arguments": arguments,
        "tool_call_id": call_id,
        "start_ns": start_ns,
        "latency_s": time.perf_counter() - started,
        "error": error,
        "output_chars": len(result),
    }


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_restore: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (saved, ours)


@contextlib.contextmanager
def relaxed_gc(threshold: int = ROLLOUT_GC_THRESHOLD) -> Iterator[None]:
    """Collect the young generation every ``threshold`` allocations, not every 700, inside.

    Why: a rollout with hundreds of calls in flight keeps thousands of young container
    objects alive at any moment (suspended coroutines, HTTP client state, histories). At
    CPython's default the collector runs every few calls, re-traverses all of that each
    time and promotes it, which in turn triggers full collections over the whole heap
    (0.05-0.1 s each with the SDK imported). Measured on the tool workload of
    ``bench/rollout.py``: about 0.15 ms of collector time per model call, 0.01 ms at 20,000.
    Memory is not at stake (garbage without cycles is freed at once; at most ``threshold``
    cyclic objects wait a little longer).

    Process-wide, so: the previous thresholds come back when the last of any concurrent
    rollouts leaves; a threshold set higher by the caller, or a disabled collector, is left
    alone, and one changed by someone else meanwhile is not overwritten.

    Example:
        >>> before = gc.get_threshold()
        >>> with relaxed_gc(max(before[0], 700) + 1):
        ...     inside = gc.get_threshold()
        >>> inside[0] > before[0], gc.get_threshold() == before
        (True, True)
    """
    global _gc_depth, _gc_restore
    with _gc_lock:
        _gc_depth += 1
        if _gc_depth == 1:
            saved = gc.get_threshold()
            if gc.isenabled() and 0 < saved[0] < threshold:
                ours = (threshold, *saved[1:])
                gc.set_threshold(*ours)
                _gc_restore = (saved, ours)
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_restore is not None:
                saved, ours = _gc_restore
                _gc_restore = None
                if gc.get_threshold() == ours:
                    gc.set_threshold(*saved)
