"""HardFilter: deterministic rules that drop trivially bad conversations.

Plain ``re`` regexes (standard library) recognise greetings and one-line "what is X"
queries in English, Chinese, Japanese and Korean; everything else is length and count
arithmetic over the shared projections of ``twinkle.data_format``, computed once per
message.

Rules, first match wins (the drop reason is the constant's value):
``no_user`` -> ``trivial_single_turn`` -> ``shallow_reply`` -> ``all_empty_assistant`` ->
``system_deny_keyword`` -> ``round_too_long`` -> ``total_too_long`` -> ``too_many_rounds``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from twinkle.data_format import (
    cjk_ratio,
    message_has_media,
    message_text,
    normalize_tool_calls,
    split_think,
)
from twinkle.preprocessor.base import Filter, Row

NO_USER = "no_user"
TRIVIAL_SINGLE_TURN = "trivial_single_turn"
SHALLOW_REPLY = "shallow_reply"
ALL_EMPTY_ASSISTANT = "all_empty_assistant"
SYSTEM_DENY_KEYWORD = "system_deny_keyword"
ROUND_TOO_LONG = "round_too_long"
TOTAL_TOO_LONG = "total_too_long"
TOO_MANY_ROUNDS = "too_many_rounds"

DROP_REASONS = (
    NO_USER,
    TRIVIAL_SINGLE_TURN,
    SHALLOW_REPLY,
    ALL_EMPTY_ASSISTANT,
    SYSTEM_DENY_KEYWORD,
    ROUND_TOO_LONG,
    TOTAL_TOO_LONG,
    TOO_MANY_ROUNDS,
)

_I, _S = re.IGNORECASE, re.DOTALL
_EN_GREETING = re.compile(
    r"(?:h+e+l+l+o+|h+i+|he+y+|yo+|howdy|greetings|good (?:morning|afternoon|evening|night|day)"
    r"|what'?s up|how'?s it going|how are you)(?:\s+(?:there|all|everyone|guys|friend))?[\s,!.?]*$",
    _I,
)
_EN_SIMPLE = re.compile(
    r"(?:(?:what|who|where|when|why|how)\s+(?:is|are|was|were|does|do|did|has|have|can|could|would|should)\b.{0,30}"
    r"|(?:what|who|where|when|why|how)'s\b.{0,30}"
    r"|(?:is|are|was|were|do|does|did|can|could|would|should|may|might)\s+(?:it|this|that|you|there|they|he|she)\b.{0,30}"
    r"|(?:tell me(?: about| more)?|explain(?: to me)?|define|describe|list|summarize|give me)\b.{0,20}"
    r"|(?:please )?(?:help me|assist me)\b.{0,20})\s*[?!.]?$",
    _I | _S,
)
_ZH_GREETING = re.compile(
    r"(?:你好+|您好+|早上好|下午好|晚上好|大家好|嗨+|哈+喽+|哈+|喂+|hello+|hi+)[\s,，！!。.]*$"
)
_ZH_SIMPLE = re.compile(
    r"(?:.{0,7}(?:是什么|是啥|啥意思|是何|什么意思|怎么样|如何|为什么|为啥)[？?。]?"
    r"|(?:什么|啥|哪|谁|何|怎么|怎样|为什么|为啥|几|多少|何时|何地).{0,7}[？?。]?"
    r"|(?:介绍|解释|说明|告诉我|帮我说说|请问|能说说|讲讲).{0,5}"
    r"|请\s*(?:给出|介绍|解释|说明|提供|列举|讲讲|阐述|描述|概述|举例|分析|说一下).{0,10}"
    r"|能否\s*(?:给出|设计|提供|介绍|解释|说明).{0,10})\s*[？?！!。]?$",
    _S,
)
_JA_GREETING = re.compile(
    r"(?:こんにちは+|こんばんは+|おはよう(?:ございます)?|やあ+|どうも+|はじめまして|よろしく(?:おねがいします|お願いします)?)[\s！!。.]*$"
)
_JA_SIMPLE = re.compile(
    r"(?:.{0,7}(?:とは何ですか|って何|とはなんですか|について教えて(?:ください)?|はどうですか|ですか)[？?]?"
    r"|(?:何|なに|どこ|いつ|誰|だれ|なぜ|どうして|どう|どれ|どの).{0,7}[？?。]?)\s*[？?！!。]?$",
    _S,
)
_KO_GREETING = re.compile(
    r"(?:안녕(?:하세요|하십니까)?|좋은\s?(?:아침|오후|저녁)(?:이에요|입니다)?|반갑습니다|여보세요)[\s！!.]*$"
)
_KO_SIMPLE = re.compile(
    r"(?:.{0,7}(?:이?란\s?무엇|는\s?무엇|은\s?무엇|이?\s?뭐|가\s?뭐)[인가요까입니]{0,3}[？?]?"
    r"|(?:무엇|뭐|어디|언제|누가|왜|어떻게).{0,7}[？?]?"
    r"|.{0,7}(?:에 대해|에 관해)\s?(?:알려주|설명해)[세요주십시오]?)\s*[？?！!]?$",
    _S,
)
_CJK_RULES = (_ZH_GREETING, _ZH_SIMPLE, _JA_GREETING, _JA_SIMPLE, _KO_GREETING, _KO_SIMPLE)
_LATIN_RULES = (_EN_GREETING, _EN_SIMPLE)


def _reasoning(msg: dict[str, Any]) -> tuple[int, bool]:
    """Characters of string reasoning, and whether a non-string reasoning value is present
    (a structured trace, which counts as thinking however long it is)."""
    chars, structured = 0, False
    for key in ("reasoning_content", "thinking"):
        value = msg.get(key)
        if isinstance(value, str):
            chars += len(value.strip())
        elif value:
            structured = True
    return chars, structured


def _tool_call_chars(calls: list[dict[str, Any]] | None) -> int:
    total = 0
    for call in calls or ():
        fn = call.get("function")
        if isinstance(fn, dict):
            args = fn.get("arguments")
            total += len(args) if isinstance(args, str) else len(str(args or ""))
    return total


class HardFilter(Filter):
    """Drop conversations that are trivially bad, using cheap deterministic rules (EN/ZH/JA/KO).

    Args:
        min_user_chars: a lone non-CJK user message shorter than this is a trivial query.
        min_user_chars_cjk: the same for CJK text (``cjk_ratio >= 0.3``).
        min_assistant_chars_2turn: in a one-user/one-assistant row, a reply (think blocks
            excluded) shorter than this is shallow unless it thinks or calls tools.
        min_thinking_chars: reasoning (``reasoning_content``/``thinking``/inline ``<think>``)
            at least this long exempts a reply from the two rules above.
        allow_incomplete_role: keep rows without any user message instead of ``no_user``.
        system_deny_keywords: case-insensitive substrings that drop a row when found in the
            first system message.
        max_chars_per_round: cap on the characters of one round (a user turn and every
            assistant/tool message until the next user turn, tool-call arguments included).
        max_total_chars: cap on the characters of the whole conversation.
        max_rounds: cap on ``min(#user, #assistant)``.
        agent_max_rounds: the cap for agent rows; defaults to ``10 * max_rounds``.

    A ``max_*`` of None or 0 disables that rule. Drop reasons: ``no_user``,
    ``trivial_single_turn``, ``shallow_reply``, ``all_empty_assistant``,
    ``system_deny_keyword``, ``round_too_long``, ``total_too_long``, ``too_many_rounds``.

    Example:
        >>> f = HardFilter(min_user_chars=10)
        >>> rows = [{'messages': [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'Hello!'}]}]
        >>> kept, dropped = f(rows)
        >>> dropped[0]['drop_reason']
        'trivial_single_turn'
    """

    def __init__(
        self,
        min_user_chars: int = 10,
        min_user_chars_cjk: int = 6,
        min_assistant_chars_2turn: int = 80,
        min_thinking_chars: int = 200,
        allow_incomplete_role: bool = False,
        system_deny_keywords: Iterable[str] | None = None,
        max_chars_per_round: int | None = None,
        max_total_chars: int | None = None,
        max_rounds: int | None = None,
        agent_max_rounds: int | None = None,
    ) -> None:
        for name, value in (
            ("min_user_chars", min_user_chars),
            ("min_user_chars_cjk", min_user_chars_cjk),
            ("min_assistant_chars_2turn", min_assistant_chars_2turn),
            ("min_thinking_chars", min_thinking_chars),
        ):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if isinstance(system_deny_keywords, str):
            raise ValueError("system_deny_keywords must be a list of strings, not one string")
        self.min_user_chars = min_user_chars
        self.min_user_chars_cjk = min_user_chars_cjk
        self.min_assistant_chars_2turn = min_assistant_chars_2turn
        self.min_thinking_chars = min_thinking_chars
        self.allow_incomplete_role = allow_incomplete_role
        words = [w for w in (system_deny_keywords or ()) if isinstance(w, str) and w]
        self.system_deny_keywords = words
        self._deny_re = re.compile("|".join(map(re.escape, words)), _I) if words else None
        self.max_chars_per_round = max_chars_per_round or None
        self.max_total_chars = max_total_chars or None
        self.max_rounds = max_rounds or None
        self.agent_max_rounds = agent_max_rounds or (max_rounds * 10 if max_rounds else None)
        self._sizes_needed = bool(self.max_chars_per_round or self.max_total_chars)

    def is_simple_query(self, text: str) -> bool:
        """True for a greeting or a one-line question too short to need a real answer."""
        t = text.strip()
        if not t:
            return True
        is_cjk = cjk_ratio(t) >= 0.3
        if len(t) < (self.min_user_chars_cjk if is_cjk else self.min_user_chars):
            return True
        if len(t) > 200:  # every simple pattern is bounded far below this
            return False
        return any(r.match(t) for r in (_CJK_RULES if is_cjk else _LATIN_RULES))

    def check(self, row: Row) -> str | None:
        # One pass builds every per-message projection the rules need.
        users: list[str] = []
        assistants: list[tuple[str, int, bool]] = []  # (reply text, thinking chars, has tool calls)
        sizes: list[tuple[str, int]] = []
        system_text = None
        agent = False
        for msg in row["messages"]:
            if not isinstance(msg, dict):
                continue
            role = msg.get("role")
            text = message_text(msg)
            if role == "assistant":
                reply, inline = split_think(text)
                calls = normalize_tool_calls(msg)
                agent = agent or calls is not None
                reasoning, structured = _reasoning(msg)
                thinking = (
                    max(self.min_thinking_chars, 1) if structured else reasoning + len(inline)
                )
                assistants.append((reply, thinking, calls is not None))
                size = len(text) + reasoning
                if calls is not None and self._sizes_needed:
                    size += _tool_call_chars(calls)
            else:
                if role == "user":
                    users.append(text)
                elif role == "system" and system_text is None:
                    system_text = text
                elif role == "tool":
                    agent = True
                size = len(text)
            sizes.append((role, size))

        if not users:
            return None if self.allow_incomplete_role else NO_USER
        first = assistants[0] if assistants else None
        if len(users) == 1 and self.is_simple_query(users[0]):
            if first is None or (first[1] < self.min_thinking_chars and not first[2]):
                return TRIVIAL_SINGLE_TURN
        if len(users) == 1 and len(assistants) == 1:
            reply, thinking, has_calls = first
            if (
                len(reply) < self.min_assistant_chars_2turn
                and thinking < self.min_thinking_chars
                and not has_calls
            ):
                return SHALLOW_REPLY
        if (
            assistants
            and not any(r.strip() or t or c for r, t, c in assistants)
            and not any(
                message_has_media(m)
                for m in row["messages"]
                if isinstance(m, dict) and m.get("role") == "assistant"
            )
        ):
            return ALL_EMPTY_ASSISTANT
        if self._deny_re is not None and system_text and self._deny_re.search(system_text):
            return SYSTEM_DENY_KEYWORD
        if self.max_chars_per_round:
            current = None  # a system prompt before the first user is not a round
            for role, size in sizes:
                if role == "user":
                    current = size
                elif current is not None:
                    current += size
                else:
                    continue
                if current > self.max_chars_per_round:
                    return ROUND_TOO_LONG
        if self.max_total_chars and sum(s for _, s in sizes) > self.max_total_chars:
            return TOTAL_TOO_LONG
        cap = self.agent_max_rounds if agent else self.max_rounds
        if cap and min(len(users), len(assistants)) > cap:
            return TOO_MANY_ROUNDS
        return None
