"""``ReplayAPI``: an ``API`` that answers with the assistant turns recorded in agent data.

Two jobs need it: re-running recorded agent conversations against live tools (does each
recorded tool call still produce what the recording says?), and running the main job with
no model configured.

How a call finds its recording: the conversation's *prompt* (every message before the first
assistant message) selects the recordings with the same prompt; the trajectory's ``id``
narrows them when several share a prompt; then only recordings whose first k assistant
turns match the k assistant turns already in the history remain. The answer is recorded
assistant turn k (content, reasoning and tool calls with their recorded ids). When the
recording has no turn k left, the answer is an empty message with ``finish_reason='stop'``.
A prompt no recording has raises ``APICallError(kind='client')``. Give rows distinct ids
when prompts repeat (``from_rows`` assigns ``replay-<i>`` to rows without one).

Example:
    >>> row = {'id': 'r1', 'messages': [
    ...     {'role': 'user', 'content': 'weather?'},
    ...     {'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c1', 'type': 'function',
    ...         'function': {'name': 'get_weather', 'arguments': {'city': 'Oslo'}}}]},
    ...     {'role': 'tool', 'tool_call_id': 'c1', 'content': 'rain'},
    ...     {'role': 'assistant', 'content': 'It rains.'}]}
    >>> api, prompts = ReplayAPI.from_rows([row])
    >>> prompts[0]['messages']
    [{'role': 'user', 'content': 'weather?'}]
    >>> api(prompts[0], None)['tool_calls'][0]['function']
    {'name': 'get_weather', 'arguments': '{"city": "Oslo"}'}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from twinkle.data_format import (
    Message,
    SamplingParams,
    Trajectory,
    message_text,
    normalize_tool_calls,
)
from twinkle.protocol.base import API, APICallError, Completion, request_message


@dataclass(slots=True)
class _Recording:
    id: Any
    assistants: list[Message]


def _split_prompt(messages: list[Any]) -> tuple[list[Any], list[Any]]:
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return messages[:i], messages[i:]
    return list(messages), []


def _prompt_key(prompt: list[Any]) -> str:
    return json.dumps(
        [
            [m.get("role"), message_text(m)] if isinstance(m, dict) else [None, str(m)]
            for m in prompt
        ],
        ensure_ascii=False,
    )


def _turn_signature(message: Message) -> str:
    """What must agree between a recorded and a replayed turn (text and calls)."""
    calls = []
    for call in normalize_tool_calls(message) or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                pass
        calls.append([function.get("name"), arguments])
    return json.dumps(
        [message_text(message), calls], sort_keys=True, ensure_ascii=False, default=str
    )


def _replayed(message: Message) -> Message:
    """A recorded assistant message as an API reply (tool-call arguments as JSON strings)."""
    clean = request_message(message, keep_reasoning=True)
    out: Message = {
        "role": "assistant",
        "content": message_text(message) if clean.get("content") is not None else "",
    }
    if clean.get("tool_calls"):
        out["tool_calls"] = clean["tool_calls"]
    if clean.get("reasoning_content"):
        out["reasoning_content"] = clean["reasoning_content"]
    out["finish_reason"] = message.get("finish_reason") or (
        "tool_calls" if clean.get("tool_calls") else "stop"
    )
    return out


class ReplayAPI(API):
    """Replay recorded assistant turns, one per call, in order.

    Args:
        recordings: rows holding whole recorded conversations (more can be ``add``-ed).

    Example:
        >>> api = ReplayAPI([{'messages': [{'role': 'user', 'content': 'hi'},
        ...                                {'role': 'assistant', 'content': 'hello'}]}])
        >>> api({'messages': [{'role': 'user', 'content': 'hi'}]}, None)['content']
        'hello'
    """

    def __init__(self, recordings: list[Trajectory] | None = None) -> None:
        self._by_prompt: dict[str, list[_Recording]] = {}
        for row in recordings or []:
            self.add(row)

    @staticmethod
    def prompt_of(row: Trajectory) -> Trajectory:
        """``row`` cut to its prompt: the messages before the first assistant message."""
        prompt, _ = _split_prompt(list(row.get("messages") or []))
        return {**row, "messages": prompt}

    def add(self, row: Trajectory) -> Trajectory:
        """Record ``row`` and return its prompt trajectory (what to roll out)."""
        messages = row.get("messages")
        if not isinstance(messages, list):
            raise TypeError(f"a recording needs a 'messages' list, got {type(messages).__name__}")
        prompt, rest = _split_prompt(messages)
        assistants = [m for m in rest if isinstance(m, dict) and m.get("role") == "assistant"]
        self._by_prompt.setdefault(_prompt_key(prompt), []).append(
            _Recording(row.get("id"), assistants)
        )
        return self.prompt_of(row)

    @classmethod
    def from_rows(cls, rows: list[Trajectory]) -> tuple[ReplayAPI, list[Trajectory]]:
        """An API over ``rows`` and the prompt trajectories to roll out, aligned with ``rows``."""
        api = cls()
        prompts = [
            api.add(row if row.get("id") is not None else {**row, "id": f"replay-{i}"})
            for i, row in enumerate(rows)
        ]
        return api, prompts

    def _recording(self, trajectory: Trajectory) -> tuple[_Recording, int]:
        prompt, rest = _split_prompt(list(trajectory.get("messages") or []))
        candidates = self._by_prompt.get(_prompt_key(prompt), [])
        if not candidates:
            raise APICallError("client", "no recording has this trajectory's prompt")
        same_id = [
            r
            for r in candidates
            if trajectory.get("id") is not None and r.id == trajectory.get("id")
        ]
        candidates = same_id or candidates
        history = [
            _turn_signature(m) for m in rest if isinstance(m, dict) and m.get("role") == "assistant"
        ]
        k = len(history)
        matching = [
            r
            for r in candidates
            if [_turn_signature(m) for m in r.assistants[:k]] == history[: len(r.assistants)]
        ]
        if not matching:
            raise APICallError(
                "client", f"history diverged from every recording after {k} assistant turns"
            )
        return matching[0], k

    def __call__(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None, **kwargs: Any
    ) -> Message | list[Message]:
        recording, k = self._recording(trajectory)
        if k < len(recording.assistants):
            reply = _replayed(recording.assistants[k])
        else:
            reply = {"role": "assistant", "content": "", "finish_reason": "stop"}
        if sampling_params is not None and sampling_params.num_samples > 1:
            return [dict(reply) for _ in range(sampling_params.num_samples)]
        return reply

    async def acomplete(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None, **kwargs: Any
    ) -> Completion:
        # A dictionary look-up: answer on the loop rather than paying for a thread hop.
        reply = self(trajectory, sampling_params, **kwargs)
        return Completion(messages=reply if isinstance(reply, list) else [reply])
