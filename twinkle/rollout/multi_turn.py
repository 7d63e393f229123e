"""``MultiTurnRollout``: token-exact multi-turn tool-use rollouts over a local sampler.

Per turn, every live trajectory's token ids go to the sampler in **one** batched call. The
sampled tokens are appended exactly as produced (label = token id, logprob kept); the reply
text is parsed into an assistant message; tools run (in a thread pool, since they may block);
then the tool messages and the next generation prompt are appended as bridge tokens with
label ``-100`` (``twinkle.rollout.bridge``). The text is never re-tokenised, so
``input_ids`` is exactly what the model saw and produced.

Stops: ``length`` (the sampler hit ``max_tokens``, or ``max_trajectory_tokens`` was reached:
the sequence is cut to the cap), ``stop`` (no tool calls), ``max_turns`` (calls left
unexecuted), ``abort``/``error`` (from the sampler), ``invalid_input``; the full table is in
``twinkle.rollout.base``, shared with ``APIMultiTurnRollout``, as is the ``turn_log`` shape.

Output per trajectory: ``dict(trajectory)`` plus ``messages`` (tool messages carry
``tool_call_id``; calls without an id get ``call_<turn>_<i>``), ``input_ids``, ``labels``
(unshifted, ``-100`` on prompt and bridge tokens), ``logprobs`` (one float per trainable
label, in order: ``logprobs[j]`` belongs to the j-th position whose label is not ``-100``;
None if the sampler gave none), ``turns``, ``stop_reason``, ``truncated``, ``turn_log`` and,
when something failed, ``error``.

It is a ``@remote_class()``: run it as a Ray actor with ``MultiTurnRollout.remote(...)`` and
``ray.get(actor.__call__.remote(trajectories))`` (Ray is imported only then).

Example:
    >>> rollout = MultiTurnRollout(sampler, template, tool_manager, max_turns=6)  # doctest: +SKIP
    >>> batch = [{'messages': [{'role': 'user', 'content': 'weather in Oslo?'}]}]
    >>> out = rollout(batch)  # doctest: +SKIP
    >>> sum(l != -100 for l in out[0]['labels']) == len(out[0]['logprobs'])  # doctest: +SKIP
    True
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twinkle.data_format import Message, SamplingParams, Trajectory
from twinkle.errors import EnvironmentFailure
from twinkle.rollout.base import (
    Rollout,
    blocking_call,
    check_batch,
    error_text,
    input_problem,
    invalid_output,
    llm_entry,
    resolve_tool_managers,
    tool_entry,
)
from twinkle.rollout.bridge import bridge_text
from twinkle.rollout.traces import write_traces
from twinkle.utils.remote import remote_class


@dataclass(slots=True, eq=False)
class _State:
    """One trajectory in flight."""

    source: dict[str, Any]
    manager: Any
    messages: list[Message]
    tools: list[Any] | None
    input_ids: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    stop_reason: str | None = None
    truncated: bool = False
    error: str | None = None
    done: bool = False
    pending: list[dict[str, Any]] = field(default_factory=list)
    last_token_id: int | None = None
    rendered: str | None = None  # the text whose tokens end input_ids before the next sampling

    def finish(self, reason: str, truncated: bool, error: str | None = None) -> None:
        self.stop_reason, self.truncated, self.done = reason, truncated, True
        if error is not None:
            self.error = error

    def output(self) -> Trajectory:
        out = dict(self.source)
        out.update(
            messages=self.messages,
            input_ids=self.input_ids,
            labels=self.labels,
            logprobs=self.logprobs or None,
            turns=self.turns,
            stop_reason=self.stop_reason,
            truncated=self.truncated,
            turn_log=self.log,
        )
        out.pop("error", None)
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(slots=True)
class _ToolTurn:
    """The results of one trajectory's tool calls in one turn."""

    messages: list[Message] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    stop_reason: str = "api_error"


@remote_class()
class MultiTurnRollout(Rollout):
    """Batched multi-turn tool-use rollout producing ``input_ids``/``labels``/``logprobs``.

    Args:
        sampler: a ``twinkle.sampler.Sampler`` (``HFSampler``, ``VLLMSampler``,
            ``ScriptedSampler``).
        template: a ``ChatTemplate`` (render, encode, parse tool calls).
        tool_manager: one ``ToolManager`` for all trajectories or a list aligned 1:1; may be
            given per call instead.
        sampling_params: default sampling parameters (``num_samples`` must be 1).
        max_turns: sampled turns per trajectory at most.
        max_trajectory_tokens: cap on the token length of a trajectory; reaching it stops the
            trajectory with ``length`` and ``truncated=True`` (the sequence is cut to the cap).
        trace_dir, trace_callback, success_callback: trace files (``twinkle.rollout.traces``).
        tool_workers: threads that run tool calls (tools may block on sandboxes); tools that
            declare ``blocking = False`` run inline.
        tool_timeout_s: stop waiting for a trajectory's tool calls of one turn after this
            many seconds per call; each call then reads ``Error: tool '<name>' timed out
            after N s`` (the worker thread finishes alone). Defaults to 300 s so a hung
            tool cannot hold the batch forever; None waits without limit.

    Example:
        >>> from twinkle.sampler import ScriptedSampler, ChatTemplate  # doctest: +SKIP
        >>> sampler = ScriptedSampler(template, lambda ids: 'done')  # doctest: +SKIP
        >>> rollout = MultiTurnRollout(sampler, template, ToolManager())  # doctest: +SKIP
        >>> batch = [{'messages': [{'role': 'user', 'content': 'hi'}]}]
        >>> rollout(batch)[0]['stop_reason']  # doctest: +SKIP
        'stop'
    """

    def __init__(
        self,
        sampler: Any,
        template: Any,
        tool_manager: Any = None,
        sampling_params: SamplingParams | None = None,
        max_turns: int = 6,
        max_trajectory_tokens: int | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        trace_callback: Callable[[Trajectory], Any] | None = None,
        success_callback: Callable[[Trajectory], Any] | None = None,
        *,
        tool_workers: int = 16,
        tool_timeout_s: float | None = 300.0,
    ) -> None:
        if sampler is None:
            raise ValueError("MultiTurnRollout requires a sampler")
        if template is None:
            raise ValueError("MultiTurnRollout requires a local Template instance")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if max_trajectory_tokens is not None and max_trajectory_tokens < 1:
            raise ValueError(
                f"max_trajectory_tokens must be >= 1 or None, got {max_trajectory_tokens}"
            )
        if sampling_params is not None and sampling_params.num_samples != 1:
            raise ValueError(
                f"MultiTurnRollout supports num_samples=1 only; got {sampling_params.num_samples}"
            )
        if tool_workers < 1:
            raise ValueError(f"tool_workers must be >= 1, got {tool_workers}")
        if tool_timeout_s is not None and tool_timeout_s <= 0:
            raise ValueError(f"tool_timeout_s must be > 0 or None, got {tool_timeout_s}")
        self.sampler = sampler
        self.template = template
        self.tool_manager = tool_manager
        self.sampling_params = sampling_params or SamplingParams()
        self.max_turns = max_turns
        self.max_trajectory_tokens = max_trajectory_tokens
        self.trace_dir = trace_dir
        self.trace_callback = trace_callback
        self.success_callback = success_callback
        self.tool_workers = tool_workers
        self.tool_timeout_s = tool_timeout_s
        self._calls = 0

    def __call__(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | None = None,
        tool_manager: Any = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        batch = check_batch(trajectories)
        sp = sampling_params or self.sampling_params
        if sp.num_samples != 1:
            raise ValueError(f"MultiTurnRollout supports num_samples=1 only; got {sp.num_samples}")
        step = self._calls if global_step is None else global_step
        self._calls += 1
        if not batch:
            return []
        managers = resolve_tool_managers(
            tool_manager if tool_manager is not None else self.tool_manager, len(batch)
        )
        outputs: list[Trajectory | None] = [None] * len(batch)
        states: dict[int, _State] = {}
        for index, (trajectory, manager) in enumerate(zip(batch, managers)):
            problem = input_problem(trajectory)
            if problem is not None:
                outputs[index] = invalid_output(trajectory, problem)
            else:
                states[index] = self._start(trajectory, manager)
        self._encode_prompts(list(states.values()))
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.tool_workers, thread_name_prefix="twinkle-tool"
        )
        try:
            for turn in range(1, self.max_turns + 1):
                live = [s for s in states.values() if not s.done]
                if not live:
                    break
                self._sample(live, sp, turn)
                waiting = [s for s in live if s.pending]
                self._run_tools(waiting, pool, turn)
                self._bridge(waiting)
        finally:
            # A tool stuck past its timeout keeps its thread; do not wait for it here.
            pool.shutdown(wait=False, cancel_futures=True)
        for index, state in states.items():
            outputs[index] = self._finish(state)
        if self.trace_dir is not None:
            write_traces(outputs, self.trace_dir, step, self.trace_callback, self.success_callback)
        return outputs  # type: ignore[return-value]

    # -- steps ---------------------------------------------------------------------------------
    def _start(self, trajectory: dict[str, Any], manager: Any) -> _State:
        tools = trajectory.get("tools")
        if tools is None and hasattr(manager, "tool_infos"):
            tools = manager.tool_infos() or None
        state = _State(
            source=trajectory, manager=manager, messages=list(trajectory["messages"]), tools=tools
        )
        try:
            state.rendered = self.template.render(state.messages, tools, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - a template that cannot render this row fails the row only
            state.finish("invalid_input", False, f"TemplateError: {error_text(exc)}")
        return state

    def _encode_prompts(self, states: list[_State]) -> None:
        """Encode every rendered prompt in one tokenizer call; apply the length cap."""
        ready = [s for s in states if not s.done]
        encode_many = getattr(self.template, "encode_texts", None)
        texts = [s.rendered or "" for s in ready]
        encoded = (
            encode_many(texts) if encode_many else [self.template.encode_text(t) for t in texts]
        )
        cap = self.max_trajectory_tokens
        for state, ids in zip(ready, encoded):
            state.input_ids, state.labels = list(ids), [-100] * len(ids)
            if cap is not None and len(state.input_ids) >= cap:
                state.finish(
                    "length",
                    True,
                    f"PromptTooLong: the prompt has {len(state.input_ids)} tokens, "
                    f"max_trajectory_tokens is {cap}",
                )

    def _sample(self, live: list[_State], sp: SamplingParams, turn: int) -> None:
        start_ns, started = time.time_ns(), time.perf_counter()
        try:
            responses = self.sampler.sample([s.input_ids for s in live], sp)
            if not isinstance(responses, list) or len(responses) != len(live):
                got = len(responses) if isinstance(responses, list) else type(responses).__name__
                raise RuntimeError(
                    f"sampler returned {got} responses for a batch of {len(live)} trajectories"
                )
        except Exception as exc:  # noqa: BLE001 - the sampler boundary: failures become stop_reason error
            for state in live:
                state.turns = turn
                state.log.append(
                    llm_entry(turn, start_ns, started, error=error_text(exc), batch_size=len(live))
                )
                state.finish("error", True, f"SamplerError: {error_text(exc)}")
            return
        latency = time.perf_counter() - started
        for state, response in zip(live, responses):
            state.turns = turn
            entry = llm_entry(
                turn,
                start_ns,
                started,
                latency_s=latency,
                batch_size=len(live),
                prompt_tokens=len(state.input_ids),
            )
            state.log.append(entry)
            sequences = getattr(response, "sequences", None)
            if not sequences:
                entry["error"] = "SamplerError: a response without sequences"
                state.finish("error", True, entry["error"])
                continue
            self._append_turn(state, sequences[0], entry, turn)

    def _append_turn(self, state: _State, seq: Any, entry: dict[str, Any], turn: int) -> None:
        tokens = list(seq.tokens)
        entry.update(completion_tokens=len(tokens), finish_reason=seq.stop_reason)
        if seq.logprobs is not None and len(seq.logprobs) != len(tokens):
            entry["error"] = (
                f"SamplerError: logprobs length ({len(seq.logprobs)}) does not match "
                f"sampled token count ({len(tokens)})"
            )
            state.finish("error", True, entry["error"])
            return
        state.input_ids += tokens
        state.labels += tokens
        if seq.logprobs is None or state.logprobs is None:
            state.logprobs = None  # one turn without logprobs makes the whole list meaningless
        else:
            state.logprobs += [float(x) for x in seq.logprobs]
        text = seq.decoded or self.template.decode(tokens)
        message = self.template.parse(text)
        calls = message.get("tool_calls") or []
        for i, call in enumerate(calls):
            call["id"] = call.get("id") or f"call_{turn}_{i}"
        state.messages.append(message)
        state.last_token_id = tokens[-1] if tokens else None
        cap = self.max_trajectory_tokens
        if seq.stop_reason in ("length", "abort", "error"):
            state.finish(seq.stop_reason, True)
        elif cap is not None and len(state.input_ids) >= cap:
            self._cut(state, cap)
        elif not calls:
            state.finish("stop", False)
        elif turn >= self.max_turns:
            state.finish("max_turns", True)
        else:
            state.pending = calls

    def _cut(self, state: _State, cap: int) -> None:
        """Cut the sequence to ``cap`` tokens, keeping logprobs aligned with trainable labels."""
        if len(state.input_ids) > cap:
            state.input_ids, state.labels = state.input_ids[:cap], state.labels[:cap]
            if state.logprobs is not None:
                state.logprobs = state.logprobs[: sum(1 for x in state.labels if x != -100)]
        state.finish("length", True)

    @staticmethod
    def _call_tools(manager: Any, calls: list[dict[str, Any]], turn: int) -> _ToolTurn:
        """Run one trajectory's calls in order. Touches no shared state, so a worker thread
        that outlives its timeout cannot corrupt the trajectory."""
        done = _ToolTurn()
        for call in calls:
            start_ns, started = time.time_ns(), time.perf_counter()
            try:
                result = str(manager(call))
            except Exception as exc:  # noqa: BLE001 - any tool failure is recorded on the trajectory
                done.log.append(tool_entry(turn, call, call["id"], start_ns, started, "", True))
                done.error = f"ToolExecution {error_text(exc)}"
                if isinstance(exc, EnvironmentFailure):  # the environment died, not the tool
                    done.error, done.stop_reason = str(exc), "error"
                return done
            done.log.append(
                tool_entry(
                    turn, call, call["id"], start_ns, started, result, result.startswith("Error")
                )
            )
            message: Message = {"role": "tool", "tool_call_id": call["id"], "content": result}
            name = (call.get("function") or {}).get("name")
            if name:
                message["name"] = name
            done.messages.append(message)
        return done

    def _timed_out(self, calls: list[dict[str, Any]], turn: int, waited: float) -> _ToolTurn:
        done = _ToolTurn()
        for call in calls:
            name = (call.get("function") or {}).get("name")
            result = f"Error: tool {name!r} timed out after {self.tool_timeout_s} s"
            done.log.append(
                tool_entry(
                    turn,
                    call,
                    call["id"],
                    time.time_ns(),
                    time.perf_counter() - waited,
                    result,
                    True,
                )
            )
            done.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": result,
                    **({"name": name} if name else {}),
                }
            )
        return done

    def _run_tools(
        self, waiting: list[_State], pool: concurrent.futures.Executor, turn: int
    ) -> None:
        """Run every waiting trajectory's calls: blocking ones in threads, under the timeout."""
        futures = {}
        for state in waiting:
            if any(blocking_call(state.manager, call) for call in state.pending):
                futures[id(state)] = (
                    state,
                    pool.submit(self._call_tools, state.manager, state.pending, turn),
                )
            else:
                self._apply_tools(state, self._call_tools(state.manager, state.pending, turn))
        started = time.monotonic()
        for state, future in futures.values():
            timeout = None
            if self.tool_timeout_s is not None:
                timeout = max(
                    0.0, started + self.tool_timeout_s * len(state.pending) - time.monotonic()
                )
            try:
                done = future.result(timeout=timeout)
            except concurrent.futures.TimeoutError:
                done = self._timed_out(state.pending, turn, time.monotonic() - started)
            self._apply_tools(state, done)

    @staticmethod
    def _apply_tools(state: _State, done: _ToolTurn) -> None:
        state.log += done.log
        state.pending = done.messages
        if done.error is not None:
            state.finish(done.stop_reason, True, done.error)
            state.pending = []

    def _bridge(self, waiting: list[_State]) -> None:
        """Append tool messages and bridge tokens; the bridge texts are encoded in one call."""
        bridged, suffixes = [], []
        for state in waiting:
            tool_messages, state.pending = state.pending, []
            if state.done:
                continue
            try:
                suffix, state.rendered = bridge_text(
                    self.template,
                    state.messages,
                    tool_messages,
                    state.tools,
                    state.last_token_id,
                    state.rendered,
                )
                if not suffix:
                    raise RuntimeError("Bridge text computation returned empty string")
            except Exception as exc:  # noqa: BLE001 - a template that cannot bridge fails the row only
                state.messages += tool_messages
                state.finish("error", True, f"BridgeError: {error_text(exc)}")
                continue
            state.messages += tool_messages
            bridged.append(state)
            suffixes.append(suffix)
        encode_many = getattr(self.template, "encode_texts", None)
        encoded = (
            encode_many(suffixes)
            if encode_many
            else [self.template.encode_text(t) for t in suffixes]
        )
        cap = self.max_trajectory_tokens
        for state, suffix, ids in zip(bridged, suffixes, encoded):
            if not ids:
                state.finish(
                    "error", True, f"BridgeError: bridge text {suffix!r} encoded to no tokens"
                )
                continue
            state.input_ids += ids
            state.labels += [-100] * len(ids)
            if cap is not None and len(state.input_ids) >= cap:
                self._cut(state, cap)

    def _finish(self, state: _State) -> Trajectory:
        trainable = sum(1 for x in state.labels if x != -100)
        if state.logprobs and len(state.logprobs) != trainable:
            state.finish(
                "error",
                True,
                f"logprobs/labels misaligned: {len(state.logprobs)} logprobs "
                f"for {trainable} trainable labels",
            )
        return state.output()
