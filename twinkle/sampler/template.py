"""``ChatTemplate``: render conversations with a tokenizer's own chat template, and parse the
model's text back into an assistant message with tool calls.

Rendering goes through ``tokenizer.apply_chat_template`` (Jinja, shipped with each model) so
the prompt is formatted exactly as the model was trained; any Hugging Face tokenizer works,
including one built locally with the ``tokenizers`` library. Tool calls are parsed in the
Qwen/Hermes format, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, which Qwen2.5,
Qwen3, Hermes and many fine-tunes emit. A block whose JSON cannot be read becomes a call with
no name, which ``ToolManager`` answers with an ``Error:`` string the model can react to.

Example:
    >>> template = ChatTemplate.__new__(ChatTemplate)
    >>> call = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    >>> message = template.parse(f'<think>plan</think>Let me check.<tool_call>{call}</tool_call>')
    >>> message['content'], message['reasoning_content'], message['tool_calls'][0]['function']
    ('Let me check.', 'plan', {'name': 'get_weather', 'arguments': '{"city": "Oslo"}'})
"""

from __future__ import annotations

import json
import re
from typing import Any

from twinkle.data_format import Message, normalize_tool_calls, split_think

_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
#: End-of-turn tokens of common chat formats, stop tokens besides the tokenizer's EOS.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>")


def _for_template(message: Message) -> dict[str, Any]:
    """A message as chat templates expect it: content a string, tool-call arguments objects."""
    out = {k: v for k, v in message.items() if k != "finish_reason"}
    if out.get("content") is None:
        out["content"] = ""
    calls = normalize_tool_calls(message)
    if calls:
        rendered = []
        for call in calls:
            function = dict(call.get("function") or {})
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    function["arguments"] = json.loads(arguments) if arguments.strip() else {}
                except json.JSONDecodeError:
                    pass  # leave the model's broken text as it was
            rendered.append({**call, "type": "function", "function": function})
        out["tool_calls"] = rendered
    elif "tool_calls" in out:
        del out["tool_calls"]
    return out


class ChatTemplate:
    """A tokenizer's chat template plus the Qwen/Hermes tool-call parser.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template (or pass ``chat_template``).
        chat_template: a Jinja template overriding the tokenizer's.
        enable_thinking: passed to the template when not None (Qwen3 reads it).
        template_kwargs: other variables for the template.

    Example:
        >>> template = ChatTemplate(tokenizer)  # doctest: +SKIP
        >>> ids = template.encode([{'role': 'user', 'content': 'hi'}])  # doctest: +SKIP
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        enable_thinking: bool | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if tokenizer is None:
            raise ValueError("ChatTemplate needs a tokenizer")
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; pass chat_template=")
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        if enable_thinking is not None:
            self.template_kwargs["enable_thinking"] = enable_thinking

    def render(
        self,
        messages: list[Message],
        tools: list[Any] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """The conversation as the model reads it."""
        kwargs = dict(self.template_kwargs)
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        return self.tokenizer.apply_chat_template(
            [_for_template(m) for m in messages],
            tools=tools or None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )

    def encode(
        self,
        messages: list[Message],
        tools: list[Any] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Token ids of the rendered conversation (the template already holds special tokens)."""
        return self.encode_text(self.render(messages, tools, add_generation_prompt))

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_texts(self, texts: list[str]) -> list[list[int]]:
        """``encode_text`` for many texts in one call to the Rust tokenizer."""
        if not texts:
            return []
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_text(self, token_id: int) -> str:
        """The text of one token, special tokens included (used to find the end of a turn)."""
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    @property
    def stop_token_ids(self) -> list[int]:
        """EOS and every end-of-turn token the vocabulary knows (looked up once)."""
        ids = self.__dict__.get("_stop_token_ids")
        if ids is None:
            ids = []
            for token in (getattr(self.tokenizer, "eos_token", None), *END_OF_TURN_TOKENS):
                token_id = self.tokenizer.convert_tokens_to_ids(token) if token else None
                unknown = getattr(self.tokenizer, "unk_token_id", None)
                if isinstance(token_id, int) and token_id != unknown and token_id not in ids:
                    ids.append(token_id)
            self.__dict__["_stop_token_ids"] = ids
        return list(ids)

    def parse(self, text: str) -> Message:
        """An assistant message from generated text: content, reasoning and tool calls."""
        response, thinking = split_think(text or "")
        calls = []
        for block in _TOOL_CALL_RE.findall(response):
            try:
                payload = json.loads(block)
            except json.JSONDecodeError:
                payload = None
            if isinstance(payload, dict) and isinstance(payload.get("name"), str):
                arguments = payload.get("arguments", payload.get("parameters", {}))
                calls.append(
                    {
                        "type": "function",
                        "function": {
                            "name": payload["name"],
                            "arguments": arguments
                            if isinstance(arguments, str)
                            else json.dumps(arguments, ensure_ascii=False),
                        },
                    }
                )
            else:
                calls.append({"type": "function", "function": {"name": None, "arguments": block}})
        message: Message = {"role": "assistant", "content": _TOOL_CALL_RE.sub("", response).strip()}
        if thinking:
            message["reasoning_content"] = thinking
        if calls:
            message["tool_calls"] = calls
        return message
