"""Twinkle's data formats and the projections every stage shares.

A *row* (or trajectory) is a plain dict: ``messages`` (OpenAI chat messages), optional
``tools``, ``id``, ``model_id``, ``user_data``; rollouts add ``turns``, ``stop_reason``,
``truncated`` and, for token-level rollouts, ``input_ids``, ``labels``, ``logprobs``.

Plain dicts (typed with ``TypedDict``) rather than classes because rows travel through
Arrow, ``datasets.map``, JSONL and Ray without conversion.

Example:
    >>> from twinkle.data_format import message_text, normalize_tool_calls
    >>> message_text({'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]})
    'hi'
    >>> raw = '[{"function": {"name": "f", "arguments": "{}"}}]'
    >>> normalize_tool_calls({'tool_calls': raw})[0]['function']['name']
    'f'
"""

from twinkle.data_format.message import (
    CJK_CHARS_RE,
    THINK_BLOCK_RE,
    Message,
    Tool,
    ToolCall,
    ToolFunction,
    Trajectory,
    cjk_ratio,
    is_agent_row,
    message_has_media,
    message_has_payload,
    message_reasoning,
    message_text,
    normalize_tool_calls,
    pack_value,
    split_think,
    user_data_get,
)
from twinkle.data_format.sampling import SampledSequence, SampleResponse, SamplingParams

__all__ = [
    "CJK_CHARS_RE",
    "THINK_BLOCK_RE",
    "Message",
    "SampleResponse",
    "SampledSequence",
    "SamplingParams",
    "Tool",
    "ToolCall",
    "ToolFunction",
    "Trajectory",
    "cjk_ratio",
    "is_agent_row",
    "message_has_media",
    "message_has_payload",
    "message_reasoning",
    "message_text",
    "normalize_tool_calls",
    "pack_value",
    "split_think",
    "user_data_get",
]
