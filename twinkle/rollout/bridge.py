"""Bridge tokens: what follows a sampled assistant turn before the model speaks again.

After the model's turn, the conversation gains tool messages and a new generation prompt.
Their tokens are computed from the chat template, not by re-tokenising the conversation:
render the history without and with the new messages (and a generation prompt), check that
the second rendering extends the first, and encode only the extension. The sampled tokens
stay exactly as the model produced them; bridge tokens get label ``-100``.

The sampled turn ends on the end-of-turn token, while templates often render more after it
(``<|im_end|>\\n``): the bridge starts right after that token's text in the rendering, so the
newline is not lost. Usually one rendering per turn suffices: the new rendering must extend
the one that ended the previous prompt, and the bridge starts after the reply's end-of-turn
token; otherwise the history is rendered alone as well and checked to be a prefix. If the turn
ended without the token (a stop string), the bridge starts at the rendered end-of-turn token,
so the model sees a well-formed turn boundary.

Example:
    >>> pif = {'input_ids': [1, 2, 3], 'labels': [-100, 2, 3],
    ...        'messages': [{'role': 'user', 'content': 'q'},
    ...                     {'role': 'assistant', 'content': 'a'}]}
    >>> tool_turn = [{'role': 'tool', 'content': 'r'}]
    >>> new = extend_with_bridge(pif, tool_turn, template)  # doctest: +SKIP
    >>> new['labels'][3:] == [-100] * (len(new['input_ids']) - 3)  # doctest: +SKIP
    True
"""

from __future__ import annotations

from typing import Any

from twinkle.data_format import Message, message_text


def _reply_text(message: Message) -> str:
    """Every string of a reply that a template may render."""
    parts = [message_text(message), str(message.get("reasoning_content") or "")]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        parts += [str(function.get("name")), str(function.get("arguments"))]
    return "\n".join(parts)


def bridge_text(
    template: Any,
    messages: list[Message],
    new_messages: list[Message],
    tools: list[Any] | None = None,
    last_token_id: int | None = None,
    previous: str | None = None,
) -> tuple[str, str]:
    """The bridge text, and the full rendering it ends (the next prompt's text).

    ``previous`` is the rendering that ended the last prompt (the first prompt, or the last
    bridge's rendering). When the new rendering extends it and the turn ended on an
    end-of-turn token, one render suffices: the bridge is what follows that token after
    ``previous``. Otherwise the history is rendered alone too and checked to be a prefix.
    """
    after = template.render(list(messages) + list(new_messages), tools, add_generation_prompt=True)
    stop_ids = list(getattr(template, "stop_token_ids", []) or [])
    ended_on_stop = last_token_id is not None and last_token_id in stop_ids
    if previous is not None and ended_on_stop and after.startswith(previous):
        end_text = template.token_text(last_token_id)
        at = after.find(end_text, len(previous)) if end_text else -1
        # An end-of-turn text inside the reply itself would make the search ambiguous.
        if at != -1 and end_text not in _reply_text(messages[-1]):
            return after[at + len(end_text) :], after
    before = template.render(messages, tools, add_generation_prompt=False)
    if not after.startswith(before):
        raise RuntimeError(
            "chat template failed the prefix-extension check: rendering with the new messages "
            f"does not extend the history (history ends {before[-80:]!r}, new rendering has "
            f"{after[max(0, len(before) - 80) : len(before) + 40]!r})"
        )
    cut = len(before)
    if ended_on_stop:
        text = template.token_text(last_token_id)
        at = before.rfind(text) if text else -1
        if at != -1 and not before[at + len(text) :].strip():
            cut = at + len(text)
    else:
        ends = [(before.rfind(t), t) for t in (template.token_text(i) for i in stop_ids) if t]
        at, text = max(ends, default=(-1, ""))
        if at != -1 and not before[at + len(text) :].strip():
            cut = at
    return after[cut:], after


def bridge_ids(
    template: Any,
    messages: list[Message],
    new_messages: list[Message],
    tools: list[Any] | None = None,
    last_token_id: int | None = None,
    previous: str | None = None,
) -> list[int]:
    """Token ids between the last sampled token and the next generation (see module docstring)."""
    suffix, _ = bridge_text(template, messages, new_messages, tools, last_token_id, previous)
    return encode_bridge(template, suffix)


def encode_bridge(template: Any, suffix: str) -> list[int]:
    if not suffix:
        raise RuntimeError("Bridge text computation returned empty string")
    ids = template.encode_text(suffix)
    if not ids:
        raise RuntimeError(f"bridge text {suffix!r} encoded to no tokens")
    return ids


def extend_with_bridge(
    pif: dict[str, Any], tool_messages: list[Message], template: Any
) -> dict[str, Any]:
    """A copy of ``pif`` with ``tool_messages`` and the next generation prompt appended.

    ``pif`` holds ``input_ids``, ``labels`` (unshifted, same length), ``messages``, and
    optionally ``tools`` and ``last_token_id`` (the last sampled token). Raises RuntimeError
    when the labels do not line up or the template cannot be bridged.
    """
    input_ids, labels = (
        list(pif["input_ids"]),
        list(pif.get("labels") or [-100] * len(pif["input_ids"])),
    )
    if len(labels) != len(input_ids):
        raise RuntimeError(
            f"labels length ({len(labels)}) != input_ids length ({len(input_ids)}); "
            "cannot safely append bridge tokens."
        )
    messages = list(pif.get("messages") or [])
    ids = bridge_ids(template, messages, tool_messages, pif.get("tools"), pif.get("last_token_id"))
    return {
        **pif,
        "input_ids": input_ids + ids,
        "labels": labels + [-100] * len(ids),
        "messages": messages + list(tool_messages),
        "last_token_id": None,
    }
