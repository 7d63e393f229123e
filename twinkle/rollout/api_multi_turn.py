"""``APIMultiTurnRollout``: multi-turn tool-use rollouts against a chat-completions API.

Built on asyncio: each trajectory is a coroutine, a semaphore keeps at most ``concurrency``
trajectories in flight, and model calls go through ``API.acomplete`` (``OpenAI`` uses the
SDK's ``AsyncOpenAI``), so hundreds of trajectories share one thread while they wait on the
network. Tool calls may block (sandbox HTTP calls, subprocesses), so they run in a thread
pool of ``concurrency`` workers and never stall the other trajectories; tools that declare
``blocking = False`` (see ``twinkle.tools.Tool``) run inline. While a batch runs, the cyclic
garbage collector's young-generation threshold is raised (``twinkle.rollout.base.relaxed_gc``,
restored after): with hundreds of calls in flight, CPython's default had it spend about
0.15 ms per model call re-scanning in-flight state.

Per trajectory, each turn: send the history (without ``finish_reason``, and without earlier
``reasoning_content``: see ``OpenAI(keep_reasoning=...)``), append the assistant message,
stop on ``finish_reason == 'length'`` or a reply without tool calls, stop with
``max_turns`` if the turn cap is reached (those calls are not run), else run every call in
order and append ``{'role': 'tool', 'tool_call_id': ..., 'name': ..., 'content': ...}``.
A call without an id gets ``call_<turn>_<i>``.

Output: ``dict(trajectory)`` plus ``messages``, ``turns`` (model calls made),
``stop_reason``, ``truncated``, ``turn_log`` and, when something failed, ``error``. The
stop reasons and the exact ``turn_log`` shape are documented in ``twinkle.rollout.base``.
Outputs come back in input order and there is always one per input, whatever fails.

Past one process: ``APIMultiTurnRollout.remote(...)`` builds it as a Ray actor (Ray is
imported only then); give each actor a share of the batch and call
``ray.get(actor.__call__.remote(share))``. A worker is bound by its client CPU per call
(about 2 ms through the SDK, 0.2 ms with ``OpenAI(..., transport='lean')``), so throughput
adds up per worker until the endpoint is the limit (``bench/rollout.py --parts scale``).

Example:
    >>> from twinkle.protocol.replay import ReplayAPI
    >>> from twinkle.tools import ToolManager
    >>> convo = [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'hello'}]
    >>> api = ReplayAPI([{'messages': convo}])
    >>> rollout = APIMultiTurnRollout(api=api, tool_manager=ToolManager(), max_turns=3)
    >>> out = rollout([{'messages': [{'role': 'user', 'content': 'hi'}]}])[0]
    >>> out['stop_reason'], out['turns'], out['messages'][-1]['content']
    ('stop', 1, 'hello')
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from twinkle.data_format import Message, SamplingParams, Trajectory, normalize_tool_calls
from twinkle.errors import EnvironmentFailure, TwinkleError
from twinkle.rollout.base import (
    Rollout,
    blocking_call,
    check_batch,
    endpoint_label,
    error_text,
    input_problem,
    invalid_output,
    llm_entry,
    relaxed_gc,
    resolve_tool_managers,
    run_sync,
    tool_entry,
)
from twinkle.rollout.traces import write_traces
from twinkle.utils.remote import remote_class

T = TypeVar("T")


class _ToolRaised(TwinkleError):
    """A tool callable raised (a ``ToolManager`` never does; other callables may)."""


def assistant_message(reply: Any, turn: int) -> tuple[Message, str | None]:
    """The reply as a history message, and its finish reason (kept out of the history)."""
    if not isinstance(reply, dict):
        return {"role": "assistant", "content": "" if reply is None else str(reply)}, None
    message: Message = {"role": "assistant", "content": reply.get("content") or ""}
    if reply.get("reasoning_content"):
        message["reasoning_content"] = reply["reasoning_content"]
    calls = []
    for i, call in enumerate(normalize_tool_calls(reply) or []):
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        calls.append(
            {
                "id": call.get("id") or f"call_{turn}_{i}",
                "type": "function",
                "function": {"name": function.get("name"), "arguments": function.get("arguments")},
            }
        )
    if calls:
        message["tool_calls"] = calls
    return message, reply.get("finish_reason")


@remote_class()
class APIMultiTurnRollout(Rollout):
    """Multi-turn tool-use rollouts over an ``API`` (e.g. ``OpenAI``), many in flight at once.

    Args:
        api: the chat client (``twinkle.protocol.openai.OpenAI``, ``ReplayAPI``, or any ``API``);
            with hundreds of calls in flight, ``OpenAI(..., transport='lean')``.
        tool_manager: one ``ToolManager`` for every trajectory, or a list aligned 1:1 with
            the trajectories (e.g. one env per trajectory); may instead be given per call.
        sampling_params: default sampling parameters (``num_samples`` must be 1).
        max_turns: model calls per trajectory at most.
        concurrency: trajectories in flight at once (and tool worker threads).
        extra_body: extra request fields, updated by the call's ``extra_body``.
        trace_dir: where to write trace files (``twinkle.rollout.traces``); None for none.
        trace_callback: decides which trajectories get a trace file.
        success_callback: decides ``ok`` or ``fail`` in the trace file name.
        tool_timeout_s: stop waiting for one tool call after this long; the model reads
            ``Error: tool '<name>' timed out after N s`` (the worker thread finishes alone).
        request_timeout_s: bound on one ``api.acomplete`` call, retries included.
            Both default to finite bounds (300 s, 900 s) so that one hung tool or stalled
            endpoint cannot hold a batch forever; pass None to wait without limit.

    Example:
        >>> from twinkle.protocol.openai import OpenAI
        >>> from twinkle.tools import ToolManager
        >>> rollout = APIMultiTurnRollout(OpenAI('qwen3-8b', base_url='http://127.0.0.1:8000/v1'),
        ...                               ToolManager(), max_turns=6, concurrency=256)
        >>> results = rollout([{'messages': [{'role': 'user', 'content': 'hi'}]}])  # doctest: +SKIP
    """

    def __init__(
        self,
        api: Any,
        tool_manager: Any = None,
        sampling_params: SamplingParams | None = None,
        max_turns: int = 6,
        concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        trace_callback: Callable[[Trajectory], Any] | None = None,
        success_callback: Callable[[Trajectory], Any] | None = None,
        *,
        tool_timeout_s: float | None = 300.0,
        request_timeout_s: float | None = 900.0,
    ) -> None:
        if api is None:
            raise ValueError("api is required (e.g. twinkle.protocol.openai.OpenAI(...))")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if sampling_params is not None and sampling_params.num_samples != 1:
            raise ValueError(
                "APIMultiTurnRollout supports num_samples=1 only; "
                f"got {sampling_params.num_samples}"
            )
        for name, value in (
            ("tool_timeout_s", tool_timeout_s),
            ("request_timeout_s", request_timeout_s),
        ):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 or None, got {value}")
        self.api = api
        self.tool_manager = tool_manager
        self.sampling_params = sampling_params or SamplingParams()
        self.max_turns = max_turns
        self.concurrency = concurrency
        self.extra_body = dict(extra_body or {})
        self.trace_dir = trace_dir
        self.trace_callback = trace_callback
        self.success_callback = success_callback
        self.tool_timeout_s = tool_timeout_s
        self.request_timeout_s = request_timeout_s
        self._calls = 0

    def __call__(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | None = None,
        tool_manager: Any = None,
        extra_body: dict[str, Any] | None = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        """Roll out ``trajectories``; see the class docstring. Safe inside a running loop."""
        return self.run_in_own_loop(
            lambda: self.acall(trajectories, sampling_params, tool_manager, extra_body, global_step)
        )

    def run_in_own_loop(self, main: Callable[[], Awaitable[T]]) -> T:
        """Run ``main()`` (coroutines over ``acall``) on an event loop owned by this call.

        The loop's default executor is sized so that a synchronous API (run by
        ``API.acomplete`` in a worker thread) gets ``concurrency`` calls in flight, not 6;
        the API's HTTP pool is closed before the loop ends. Safe inside a running loop.
        """

        async def run_and_close() -> T:
            asyncio.get_running_loop().set_default_executor(
                concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.concurrency, thread_name_prefix="twinkle-api"
                )
            )
            try:
                return await main()
            finally:
                aclose = getattr(self.api, "aclose", None)
                if aclose is not None:
                    await aclose()

        return run_sync(run_and_close())

    async def acall(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | None = None,
        tool_manager: Any = None,
        extra_body: dict[str, Any] | None = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        """The coroutine behind ``__call__``, for callers that already run an event loop."""
        batch = check_batch(trajectories)
        sp = sampling_params or self.sampling_params
        if sp.num_samples != 1:
            raise ValueError(
                f"APIMultiTurnRollout supports num_samples=1 only; got {sp.num_samples}"
            )
        step = self._calls if global_step is None else global_step
        self._calls += 1
        if not batch:
            return []
        managers = resolve_tool_managers(
            tool_manager if tool_manager is not None else self.tool_manager, len(batch)
        )
        body = {**self.extra_body, **(extra_body or {})}
        # One schema list per manager and batch, not one per trajectory.
        schemas: dict[int, Any] = {}
        semaphore = asyncio.Semaphore(self.concurrency)
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.concurrency, thread_name_prefix="twinkle-tool"
        )
        try:
            with relaxed_gc():  # see relaxed_gc: the collector's cost grows with calls in flight
                outputs = await asyncio.gather(
                    *(
                        self._guarded(semaphore, pool, trajectory, manager, sp, body, schemas)
                        for trajectory, manager in zip(batch, managers)
                    )
                )
        finally:
            # A tool stuck past its timeout keeps its thread; do not wait for it here.
            pool.shutdown(wait=False, cancel_futures=True)
        if self.trace_dir is not None:
            await asyncio.to_thread(
                write_traces,
                outputs,
                self.trace_dir,
                step,
                self.trace_callback,
                self.success_callback,
            )
        return outputs

    async def _guarded(
        self,
        semaphore: asyncio.Semaphore,
        pool: concurrent.futures.Executor,
        trajectory: Any,
        manager: Any,
        sp: SamplingParams,
        body: dict[str, Any],
        schemas: dict[int, Any],
    ) -> Trajectory:
        problem = input_problem(trajectory)
        if problem is not None:
            return invalid_output(trajectory, problem)
        async with semaphore:
            try:
                return await self._run_one(pool, trajectory, manager, sp, body, schemas)
            except Exception as exc:  # noqa: BLE001 - a bug must cost one trajectory, not the batch
                out = dict(trajectory)
                out.update(
                    stop_reason="error",
                    truncated=True,
                    error=f"Internal {error_text(exc)}",
                    turns=out.get("turns", 0),
                    turn_log=out.get("turn_log", []),
                )
                out.setdefault("messages", list(trajectory["messages"]))
                return out

    async def _complete(
        self, request: dict[str, Any], sp: SamplingParams, body: dict[str, Any]
    ) -> Any:
        call = self.api.acomplete(request, sp, **({"extra_body": body} if body else {}))
        try:
            if self.request_timeout_s is None:
                return await call
            # asyncio.timeout, not wait_for: wait_for (3.11) runs the call in a task of its
            # own, an extra loop step per call between reply and next request.
            async with asyncio.timeout(self.request_timeout_s):
                return await call
        except TimeoutError as exc:
            # asyncio's TimeoutError has no message: say what did not answer, and for how long.
            where = endpoint_label(getattr(self.api, "base_url", None)) or type(self.api).__name__
            raise TimeoutError(
                f"no reply from {where} within request_timeout_s={self.request_timeout_s:g} s"
            ) from exc
        except Exception as exc:
            # The SDK's "APIConnectionError: Connection error." names no endpoint: add it.
            where = endpoint_label(getattr(self.api, "base_url", None))
            message = getattr(exc, "message", None)
            if where and isinstance(message, str) and where not in message:
                exc.message = f"{message} (endpoint {where})"
            raise

    async def _run_tool(
        self, pool: concurrent.futures.Executor, manager: Any, call: dict[str, Any]
    ) -> str:
        if not blocking_call(manager, call):
            try:
                return str(manager(call))
            except EnvironmentFailure:
                raise
            except Exception as exc:
                raise _ToolRaised(f"ToolExecution {error_text(exc)}") from exc
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(pool, manager, call)
        name = (call.get("function") or {}).get("name")
        try:
            if self.tool_timeout_s is None:
                return str(await future)
            async with asyncio.timeout(self.tool_timeout_s):
                return str(await future)
        except TimeoutError:
            return f"Error: tool {name!r} timed out after {self.tool_timeout_s} s"
        except EnvironmentFailure:
            raise
        except Exception as exc:
            raise _ToolRaised(f"ToolExecution {error_text(exc)}") from exc

    async def _run_one(
        self,
        pool: concurrent.futures.Executor,
        trajectory: Trajectory,
        manager: Any,
        sp: SamplingParams,
        body: dict[str, Any],
        schemas: dict[int, Any] | None = None,
    ) -> Trajectory:
        messages: list[Message] = list(trajectory["messages"])
        tools = trajectory.get("tools")
        if tools is None:
            schemas = {} if schemas is None else schemas
            tools = schemas.get(id(manager))
            if tools is None and hasattr(manager, "tool_infos"):
                tools = schemas[id(manager)] = manager.tool_infos()
        request: dict[str, Any] = {"messages": messages}
        if tools:
            request["tools"] = tools
        if trajectory.get("id") is not None:
            request["id"] = trajectory["id"]  # lets ReplayAPI tell apart rows with equal prompts
        log: list[dict[str, Any]] = []
        out = dict(trajectory)
        out.update(messages=messages, turn_log=log, truncated=False)
        out.pop("error", None)
        turn = 0
        while True:
            turn += 1
            start_ns, started = time.time_ns(), time.perf_counter()
            try:
                completion = await self._complete(request, sp, body)
                reply = completion.messages[0]
            except Exception as exc:  # noqa: BLE001 - the API boundary: failures become api_error
                error = error_text(exc)
                log.append(
                    llm_entry(
                        turn, start_ns, started, error=error, attempts=getattr(exc, "attempts", 1)
                    )
                )
                out.update(stop_reason="api_error", truncated=True, error=error, turns=turn)
                return out
            message, finish_reason = assistant_message(reply, turn)
            log.append(
                llm_entry(
                    turn,
                    start_ns,
                    started,
                    finish_reason=finish_reason,
                    prompt_tokens=completion.prompt_tokens,
                    completion_tokens=completion.completion_tokens,
                    attempts=completion.attempts,
                )
            )
            messages.append(message)
            out["turns"] = turn
            calls = message.get("tool_calls") or []
            if finish_reason == "length":
                out.update(stop_reason="length", truncated=True)
                return out
            if not calls:
                out["stop_reason"] = "stop"
                return out
            if turn >= self.max_turns:
                out.update(stop_reason="max_turns", truncated=True)
                return out
            for call in calls:
                start_ns, started = time.time_ns(), time.perf_counter()
                try:
                    result = await self._run_tool(pool, manager, call)
                except _ToolRaised as exc:
                    log.append(tool_entry(turn, call, call["id"], start_ns, started, "", True))
                    out.update(stop_reason="api_error", truncated=True, error=str(exc))
                    return out
                except EnvironmentFailure as exc:  # the sandbox died: not the model's doing
                    log.append(tool_entry(turn, call, call["id"], start_ns, started, "", True))
                    out.update(stop_reason="error", truncated=True, error=str(exc))
                    return out
                log.append(
                    tool_entry(
                        turn,
                        call,
                        call["id"],
                        start_ns,
                        started,
                        result,
                        result.startswith("Error"),
                    )
                )
                tool_message: Message = {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": result,
                }
                if call["function"].get("name"):
                    tool_message["name"] = call["function"]["name"]
                messages.append(tool_message)
