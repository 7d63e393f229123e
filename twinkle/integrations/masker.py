"""Token ids and a model/environment mask for multi-turn RL, from trajectories.

Two modes:

* ``plain`` (the default, for compatibility): the prompt and each turn's text are encoded
  one after another with ``tokenizer.encode``; no chat template.
* ``chat``: the conversation is rendered with the tokenizer's own chat template
  (``apply_chat_template``), so the ids are the ones the policy saw during a chat-formatted
  rollout. Each assistant turn's tokens (its content, tool calls and end-of-turn token) are
  masked 1; the prompt, role headers, separators after the end-of-turn token, tool
  results and user turns are masked 0. The spans
  come from rendering growing prefixes of the conversation, which needs a template whose
  output for a prefix is a prefix of the output for the whole (true of ChatML, Llama and
  Qwen templates); a template that is not raises ``ValueError``.

Inputs are :class:`twinkle.core.trajectory.Trajectory` objects (per-transition rewards) or
chat messages (``mask_messages``, e.g. a rollout's output row). The tokenizer is any
Hugging Face tokenizer; ``plain`` mode only needs ``encode``.

Example:
    >>> class Chars:                       # a toy tokenizer: one id per character
    ...     def encode(self, text, add_special_tokens=False): return [ord(c) for c in text]
    >>> m = TrajectoryMasker(Chars()).mask_messages(
    ...     [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ab"},
    ...      {"role": "tool", "content": "c"}, {"role": "assistant", "content": "d"}],
    ...     rewards=[0.0, 1.0])
    >>> m.response_mask, m.rewards
    ((1, 1, 0, 1), (0.0, 1.0))
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["MaskedTrajectory", "TokenSpan", "TrajectoryMasker"]

Source = Literal["model", "environment"]


@dataclass(frozen=True)
class TokenSpan:
    """A run of tokens from one source; ``step_index`` is the assistant turn it belongs to.

    Example:
        >>> TokenSpan("ok", (111, 107), "model", step_index=0).source
        'model'
    """

    text: str
    token_ids: tuple[int, ...]
    source: Source
    step_index: int


@dataclass(frozen=True)
class MaskedTrajectory:
    """Prompt ids, response ids with their mask (1 model, 0 environment), spans, per-turn rewards.

    Example:
        >>> m = MaskedTrajectory(prompt_ids=(1, 2), response_ids=(3, 4, 5),
        ...                      response_mask=(1, 0, 1), spans=(), rewards=(1.0,))
        >>> m.input_ids, m.num_model_tokens
        ((1, 2, 3, 4, 5), 2)
    """

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_mask: tuple[int, ...]
    spans: tuple[TokenSpan, ...]
    rewards: tuple[float, ...]

    @property
    def input_ids(self) -> tuple[int, ...]:
        return self.prompt_ids + self.response_ids

    @property
    def num_model_tokens(self) -> int:
        return sum(self.response_mask)


_EMPTY = MaskedTrajectory((), (), (), (), ())
_KEEP = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")


def _chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as chat templates expect it: known keys, tool-call arguments as dicts."""
    out = {k: message[k] for k in _KEEP if k in message and message[k] is not None}
    if out.get("content") is None:
        out["content"] = ""
    calls = out.get("tool_calls")
    if isinstance(calls, str):
        from twinkle.data_format import normalize_tool_calls

        calls = normalize_tool_calls(out) or []
    if calls:
        fixed = []
        for call in calls:
            fn = dict(call.get("function") or {})
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    fn["arguments"] = json.loads(args) if args.strip() else {}
                except ValueError:
                    pass  # leave the raw string; the template will print it
            fixed.append({**call, "type": call.get("type", "function"), "function": fn})
        out["tool_calls"] = fixed
    elif "tool_calls" in out:
        del out["tool_calls"]
    return out


class TrajectoryMasker:
    """Turns trajectories into token ids, a response mask and per-turn rewards.

    Args:
        tokenizer: a Hugging Face tokenizer (``plain`` mode: anything with ``encode``).
        mode: ``"plain"`` (concatenated text) or ``"chat"`` (the tokenizer's chat template).
        end_of_turn: the text that ends a generated turn in ``chat`` mode (default: the
            tokenizer's ``eos_token``, e.g. ``<|im_end|>``); template text after it is the
            environment's.

    Example:
        >>> masker = TrajectoryMasker(tokenizer, mode="chat")        # doctest: +SKIP
        >>> out = masker.mask_messages(row["messages"], tools=row.get("tools"))  # doctest: +SKIP
        >>> sum(out.response_mask)       # tokens the policy generated   # doctest: +SKIP
    """

    def __init__(
        self,
        tokenizer: Any,
        mode: Literal["plain", "chat"] = "plain",
        end_of_turn: str | None = None,
    ) -> None:
        if mode not in ("plain", "chat"):
            raise ValueError(f"mode must be 'plain' or 'chat', got {mode!r}")
        if mode == "chat" and not callable(getattr(tokenizer, "apply_chat_template", None)):
            raise TypeError("mode='chat' needs a tokenizer with apply_chat_template")
        self.tokenizer = tokenizer
        self.mode = mode
        eos = getattr(tokenizer, "eos_token", None)
        self.end_of_turn = end_of_turn or (eos if isinstance(eos, str) and eos else None)

    # -- encoding helpers --------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        if not text:
            return []
        try:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        except TypeError:  # a minimal tokenizer with encode(text) only
            return list(self.tokenizer.encode(text))

    def _render(self, messages: list[dict[str, Any]], tools: Any, generation: bool) -> str:
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": generation}
        if tools:
            kwargs["tools"] = tools
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    # -- public API --------------------------------------------------------------------
    def mask_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        rewards: Sequence[float] | None = None,
    ) -> MaskedTrajectory:
        """Mask a chat conversation: assistant turns are the model's, the rest the environment's.

        ``rewards`` holds one value per assistant turn (missing ones are 0.0).
        """
        msgs = [_chat_message(m) for m in messages if isinstance(m, Mapping)]
        first = next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), None)
        if first is None:
            prompt_ids = self._prompt_ids(msgs, tools)
            return MaskedTrajectory(tuple(prompt_ids), (), (), (), ())
        n_turns = sum(m["role"] == "assistant" for m in msgs)
        turn_rewards = [float(r) for r in (rewards or ())][:n_turns]
        turn_rewards += [0.0] * (n_turns - len(turn_rewards))
        if self.mode == "chat":
            prompt_ids, spans = self._chat_spans(msgs, tools, first)
        else:
            prompt_ids, spans = self._plain_spans(msgs, first)
        return self._assemble(prompt_ids, spans, turn_rewards)

    def mask_trajectory(self, trajectory: Any) -> MaskedTrajectory:
        """Mask a :class:`twinkle.core.trajectory.Trajectory` (one reward per transition)."""
        transitions = trajectory.transitions
        if not transitions:
            return _EMPTY
        if self.mode == "chat":
            return self.mask_messages(
                _trajectory_messages(trajectory),
                tools=[t.to_openai() for t in trajectory.initial_state.observation.available_tools]
                or None,
                rewards=[t.rewards.total for t in transitions],
            )
        prompt_ids = self._encode(trajectory.initial_state.observation.prompt)
        spans: list[TokenSpan] = []
        for i, t in enumerate(transitions):
            if t.action.text is not None:
                spans.append(self._span(t.action.text, "model", i))
            if t.action.tool_calls:
                text = "\n".join(
                    json.dumps({"id": c.id, "name": c.name, "arguments": c.arguments})
                    for c in t.action.tool_calls
                )
                spans.append(self._span(text, "model", i))
            if i < len(transitions) - 1:
                env_text = "".join(
                    json.dumps(r.output) if isinstance(r.output, dict) else str(r.output)
                    for r in t.next_state.observation.tool_results
                )
                if t.next_state.observation.prompt != t.state.observation.prompt:
                    env_text += t.next_state.observation.prompt
                if env_text:
                    spans.append(self._span(env_text, "environment", i))
        spans = [s for s in spans if s.token_ids]
        return self._assemble(prompt_ids, spans, [t.rewards.total for t in transitions])

    def mask_batch(self, trajectories: Sequence[Any]) -> list[MaskedTrajectory]:
        """Mask many: core trajectories, or rows/message lists (rows may carry ``rewards``)."""
        out = []
        for t in trajectories:
            if isinstance(t, Mapping):
                out.append(
                    self.mask_messages(
                        t.get("messages") or [], tools=t.get("tools"), rewards=t.get("rewards")
                    )
                )
            elif isinstance(t, list):
                out.append(self.mask_messages(t))
            else:
                out.append(self.mask_trajectory(t))
        return out

    # -- internals ---------------------------------------------------------------------
    def _span(self, text: str, source: Source, step: int) -> TokenSpan:
        return TokenSpan(text, tuple(self._encode(text)), source, step)

    def _prompt_ids(self, msgs: list[dict[str, Any]], tools: Any) -> list[int]:
        if self.mode == "chat":
            return self._encode(self._render(msgs, tools, True)) if msgs else []
        return self._encode("".join(str(m.get("content") or "") for m in msgs))

    def _plain_spans(
        self, msgs: list[dict[str, Any]], first: int
    ) -> tuple[list[int], list[TokenSpan]]:
        prompt_ids = self._encode("".join(str(m.get("content") or "") for m in msgs[:first]))
        spans, turn = [], -1
        for m in msgs[first:]:
            text = str(m.get("content") or "")
            if m["role"] == "assistant":
                turn += 1
                if m.get("tool_calls"):
                    text += "".join(
                        "\n"
                        + json.dumps(
                            {
                                "id": c.get("id"),
                                "name": c["function"].get("name"),
                                "arguments": c["function"].get("arguments"),
                            }
                        )
                        for c in m["tool_calls"]
                    )
                spans.append(self._span(text, "model", turn))
            elif text:
                spans.append(self._span(text, "environment", turn))
        return prompt_ids, [s for s in spans if s.token_ids]

    def _chat_spans(
        self, msgs: list[dict[str, Any]], tools: Any, first: int
    ) -> tuple[list[int], list[TokenSpan]]:
        prefix = self._render(msgs[:first], tools, True)
        prompt_ids = self._encode(prefix)
        spans: list[TokenSpan] = []
        done = prefix  # the rendered text covered so far
        turn = -1
        for j in range(first, len(msgs)):
            if msgs[j]["role"] != "assistant":
                continue
            turn += 1
            before = self._render(msgs[:j], tools, True)
            after = self._render(msgs[: j + 1], tools, False)
            if j > first:  # what the environment added since the last turn, role header included
                spans.append(self._diff(done, before, "environment", turn - 1))
            model_text = self._diff(before, after, "model", turn).text
            # The model stops at its end-of-turn token; what the template puts after it
            # (ChatML's newline) was never generated, so it belongs to the environment.
            if self.end_of_turn and self.end_of_turn in model_text:
                model_text = model_text[
                    : model_text.rindex(self.end_of_turn) + len(self.end_of_turn)
                ]
            spans.append(self._span(model_text, "model", turn))
            done = before + model_text
        spans.append(self._diff(done, self._render(msgs, tools, False), "environment", turn))
        return prompt_ids, [s for s in spans if s.token_ids]

    def _diff(self, before: str, after: str, source: Source, step: int) -> TokenSpan:
        if not after.startswith(before):
            raise ValueError(
                "the chat template is not prefix-stable (rendering more messages changed the "
                f"earlier text near {before[-60:]!r}); use mode='plain'"
            )
        return self._span(after[len(before) :], source, step)

    @staticmethod
    def _assemble(
        prompt_ids: list[int], spans: list[TokenSpan], rewards: list[float]
    ) -> MaskedTrajectory:
        ids: list[int] = []
        mask: list[int] = []
        for s in spans:
            ids.extend(s.token_ids)
            mask.extend([1 if s.source == "model" else 0] * len(s.token_ids))
        return MaskedTrajectory(
            tuple(prompt_ids), tuple(ids), tuple(mask), tuple(spans), tuple(rewards)
        )


def _trajectory_messages(trajectory: Any) -> list[dict[str, Any]]:
    """Chat messages of a core trajectory: its initial messages, then one turn per transition."""
    obs = trajectory.initial_state.observation
    msgs = [dict(m) for m in obs.messages] or [{"role": "user", "content": obs.prompt}]
    transitions = trajectory.transitions
    for i, t in enumerate(transitions):
        msg: dict[str, Any] = {"role": "assistant", "content": t.action.text or ""}
        if t.action.tool_calls:
            msg["tool_calls"] = [c.to_openai() for c in t.action.tool_calls]
        msgs.append(msg)
        if i == len(transitions) - 1:
            break
        nxt = t.next_state.observation
        for r in nxt.tool_results:
            out = json.dumps(r.output) if isinstance(r.output, dict) else str(r.output)
            msgs.append({"role": "tool", "tool_call_id": r.call_id, "content": out})
        if not nxt.tool_results and nxt.prompt != t.state.observation.prompt:
            msgs.append({"role": "user", "content": nxt.prompt})
    return msgs
