"""HardFilter: deterministic rules that drop trivially bad conversations.

Plain ``re`` regexes (standard library) recognise greetings and one-line "what is X"
queries in English, Chinese, Japanese and Korean; everything else is length and count
arithmetic over the shared projections of ``twinkle.data_format``. Think blocks are split
and tool calls normalised only for the messages a rule looks at, so the filter costs
little more than a plain per-row check of the same rules.

Lengths are widths: a CJK character counts as three Latin ones (``text_width``), so the
80-character reply minimum means the same in every script. A short reply that is a
complete sentence is an answer, not a shallow reply, and a simple query with a long
answer is not trivial: both sides of the exchange are judged. The seed's rules stay
available (``cjk_char_width=1``, ``keep_complete_answers=False``,
``substantive_answer_chars=0``).

Rules, first match wins (the drop reason is the constant's value):
``no_user`` -> ``trivial_single_turn`` -> ``shallow_reply`` -> ``all_empty_assistant`` ->
``system_deny_keyword`` -> ``round_too_long`` -> ``total_too_long`` -> ``too_many_rounds``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from twinkle.data_format import (
    CJK_CHARS_RE,
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
    r"|(?:tell me(?: about| more)?|explain(?: to me)?|define|describe|list|summarize|give me)"
    r"\b.{0,20}"
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
_CJK_GREETINGS = (_ZH_GREETING, _JA_GREETING, _KO_GREETING)
_THINK_TAG_RE = re.compile(r"<think", re.IGNORECASE)

# A complete short answer: a sentence that ends like one ("?" does not: a question back is
# no answer), after any acknowledgement that opens it ("Sure, ...", "好的，...").
_SENTENCE_END = re.compile(r"[.!。！…](?:[\"'”’)\]）」』*_]|\s)*$")
_ACK_LEAD = re.compile(
    r"(?:sure|ok(?:ay)?|of course|certainly|absolutely|no problem|got it|alright|all right"
    r"|will do|sounds good|thanks|thank you|you'?re welcome|yes|yeah|yep|no|nope|done|great"
    r"|noted|understood)\b[\s,.!:;-]*"
    r"|(?:好的|好|当然|没问题|可以|收到|谢谢|不客气|明白了?|是的|はい|いいえ|わかりました|了解(?:です|しました)?"
    r"|承知(?:しました)?|네|아니요|알겠습니다|물론(?:이죠|입니다)?|좋아요|감사합니다)[\s,，、.。!！:：]*",
    _I,
)
# Replies that only promise, defer or shrug: never a complete answer, however well formed.
_NON_ANSWER = re.compile(
    r"^(?:i|we)(?: can|'ll| will| could| shall| would be happy to| am happy to|'m happy to)"
    r"(?: definitely| certainly| gladly)?(?: get)? (?:help|do (?:that|this|it)|assist|look into"
    r"|write|draft|start|begin|work on|take care|handle|prepare|on it|started)\b"
    r"|^(?:here (?:it is|you go|you are|is|are)|let me (?:know|check|see|think|look))\b"
    r"|\bi (?:don'?t|do not) know\b|\bi(?:'m| am) not sure\b|^no idea\b"
    r"|^(?:我(?:来|可以|会)(?:帮|为)|让我(?:想想|看看)|我?(?:这就|马上|稍等))"
    r"|我也?(?:不知道|不清楚|不确定)"
    r"|^(?:お手伝いします|確認します|すぐに|少々お待ち)|わかりません|知りません"
    r"|^(?:도와\s?드리겠습니다|확인해\s?보겠습니다|바로|잠시만)|모르겠습니다|잘 모르",
    _I,
)


def text_width(text: str, cjk_char_width: int = 3) -> int:
    """Length of ``text`` where each CJK character (Han, kana, Hangul) counts as
    ``cjk_char_width`` Latin characters: one Chinese character carries about as much as three
    Latin letters, so an 80-character minimum means the same in both scripts.

    Example:
        >>> text_width('Paris'), text_width('巴黎'), text_width('巴黎', 1)
        (5, 6, 2)
    """
    if text.isascii() or cjk_char_width == 1:
        return len(text)
    return len(text) + (cjk_char_width - 1) * len(CJK_CHARS_RE.findall(text))


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


def _calls(msg: dict[str, Any]) -> list[dict[str, Any]] | None:
    """``normalize_tool_calls`` with a fast path for the usual list of call dicts."""
    raw = msg.get("tool_calls")
    if not raw:
        return None
    if type(raw) is list and all(type(c) is dict and type(c.get("function")) is dict for c in raw):
        return raw
    return normalize_tool_calls(msg)


def _tool_call_chars(calls: list[Any] | None) -> int:
    total = 0
    for call in calls or ():
        fn = call.get("function") if type(call) is dict else None
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
            excluded) narrower than this (``text_width``: a CJK character counts as
            ``cjk_char_width``) is shallow unless it thinks, calls tools or is a complete
            short answer.
        cjk_char_width: how many Latin characters one CJK character counts for in the
            reply minimums (1 = the seed's plain character count).
        keep_complete_answers: a short reply that is a complete sentence ("The fifth planet
            from the Sun is Jupiter.", "北京是中国的首都。") is not shallow. It must end like
            a sentence (not with "?") and, after an opening acknowledgement, hold at least
            ``min_complete_answer_words`` words (CJK: a width of 15); promises, "OK."
            and shrugs ("I don't know.") stay shallow. False gives the seed's rule.
        min_complete_answer_words: words a complete short answer needs.
        substantive_answer_chars: a simple query ("Explain Newton's second law") whose reply
            is at least this wide is not trivial: the exchange is judged on both sides.
            Greetings stay trivial whatever the reply. 0 gives the seed's rule (the query
            alone decides).
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
        >>> rows = [{'messages': [{'role': 'user', 'content': 'hi'},
        ...                       {'role': 'assistant', 'content': 'Hello!'}]}]
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
        cjk_char_width: int = 3,
        keep_complete_answers: bool = True,
        min_complete_answer_words: int = 3,
        substantive_answer_chars: int = 200,
    ) -> None:
        for name, value in (
            ("min_user_chars", min_user_chars),
            ("min_user_chars_cjk", min_user_chars_cjk),
            ("min_assistant_chars_2turn", min_assistant_chars_2turn),
            ("min_thinking_chars", min_thinking_chars),
            ("min_complete_answer_words", min_complete_answer_words),
            ("substantive_answer_chars", substantive_answer_chars),
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
        if not isinstance(cjk_char_width, int) or cjk_char_width < 1:
            raise ValueError(f"cjk_char_width must be a positive int, got {cjk_char_width!r}")
        self.cjk_char_width = cjk_char_width
        self.keep_complete_answers = keep_complete_answers
        self.min_complete_answer_words = min_complete_answer_words
        self.substantive_answer_chars = substantive_answer_chars

    def is_simple_query(self, text: str) -> bool:
        """True for a greeting or a one-line question too short to need a real answer."""
        return self.query_kind(text) is not None

    def query_kind(self, text: str) -> str | None:
        """``'greeting'``, ``'short'`` (under the minimum length), ``'simple'`` (a one-line
        "what is X") or None for a query that needs a real answer."""
        t = text.strip()
        if not t:
            return "short"
        if len(t) > 200:  # every simple pattern is bounded far below this
            return None
        is_cjk = not t.isascii() and cjk_ratio(t) >= 0.3
        greetings = _CJK_GREETINGS if is_cjk else (_EN_GREETING,)
        if any(r.match(t) for r in greetings):
            return "greeting"
        if len(t) < (self.min_user_chars_cjk if is_cjk else self.min_user_chars):
            return "short"
        if any(r.match(t) for r in (_CJK_RULES if is_cjk else _LATIN_RULES)):
            return "simple"
        return None

    def is_complete_answer(self, reply: str) -> bool:
        """A short reply that still answers: one finished sentence with enough words."""
        t = reply.strip()
        if not _SENTENCE_END.search(t):
            return False
        core = _ACK_LEAD.sub("", t, count=1) if _ACK_LEAD.match(t) else t
        if not core or _NON_ANSWER.search(core):
            return False
        if not core.isascii() and CJK_CHARS_RE.search(core):
            return text_width(core, 3) >= 15
        return len(core.split()) >= self.min_complete_answer_words

    def _assistant(self, msg: dict[str, Any], text: str) -> tuple[str, int, bool]:
        """``(reply without think blocks, thinking chars, has tool calls)`` of an assistant."""
        if "<" in text and _THINK_TAG_RE.search(text):
            reply, inline = split_think(text)
        else:
            reply, inline = text, ""
        reasoning, structured = _reasoning(msg)
        thinking = max(self.min_thinking_chars, 1) if structured else reasoning + len(inline)
        return reply, thinking, _calls(msg) is not None

    def _has_payload(self, msg: dict[str, Any], text: str) -> bool:
        """Whether an assistant message carries anything: reply text, thinking, calls, media."""
        if text.strip() and not ("<" in text and _THINK_TAG_RE.search(text)):
            return True
        if msg.get("tool_calls") and _calls(msg) is not None:
            return True
        reply, thinking, calls = self._assistant(msg, text)
        return bool(reply.strip() or thinking or calls or message_has_media(msg))

    def _is_shallow(self, reply: str) -> bool:
        if text_width(reply, self.cjk_char_width) >= self.min_assistant_chars_2turn:
            return False
        return not (self.keep_complete_answers and self.is_complete_answer(reply))

    def check(self, row: Row) -> str | None:
        # One pass collects the texts and, when a cap is set, the round and total sizes;
        # the costlier projections (think blocks, tool calls) are computed only for the
        # messages a rule actually looks at.
        users: list[str] = []
        assistants: list[tuple[dict[str, Any], str]] = []
        sized = self._sizes_needed
        round_cap = self.max_chars_per_round or 0
        system_text = None
        agent = False
        total = 0
        current = -1  # characters of the current round; none before the first user turn
        long_round = False
        for msg in row["messages"]:
            if type(msg) is not dict and not isinstance(msg, dict):
                continue
            role = msg.get("role")
            content = msg.get("content")
            text = content if type(content) is str else message_text(msg)
            if role == "assistant":
                assistants.append((msg, text))
                if not sized:
                    continue
                size = len(text)
                value = msg.get("reasoning_content")
                if value and type(value) is str:
                    size += len(value)
                value = msg.get("thinking")
                if value and type(value) is str:
                    size += len(value)
                calls = msg.get("tool_calls")
                if calls:
                    plain = type(calls) is list and type(calls[0]) is dict
                    size += _tool_call_chars(calls if plain else _calls(msg))
            else:
                if role == "user":
                    users.append(text)
                elif role == "system":
                    if system_text is None:
                        system_text = text
                elif role == "tool":
                    agent = True
                if not sized:
                    continue
                size = len(text)
            total += size
            if role == "user":
                current = size
            elif current >= 0:
                current += size
            if round_cap and current > round_cap:
                long_round = True

        if not users:
            return None if self.allow_incomplete_role else NO_USER
        first = self._assistant(*assistants[0]) if assistants and len(users) == 1 else None
        if len(users) == 1:
            kind = self.query_kind(users[0])
            if kind is not None and (
                first is None
                or (
                    first[1] < self.min_thinking_chars
                    and not first[2]
                    and (
                        kind == "greeting"
                        or not self.substantive_answer_chars
                        or text_width(first[0], self.cjk_char_width) < self.substantive_answer_chars
                    )
                )
            ):
                return TRIVIAL_SINGLE_TURN
        if first is not None and len(assistants) == 1:
            reply, thinking, has_calls = first
            if thinking < self.min_thinking_chars and not has_calls and self._is_shallow(reply):
                return SHALLOW_REPLY
        if assistants and not any(self._has_payload(m, t) for m, t in assistants):
            return ALL_EMPTY_ASSISTANT
        if self._deny_re is not None and system_text and self._deny_re.search(system_text):
            return SYSTEM_DENY_KEYWORD
        if long_round:
            return ROUND_TOO_LONG
        if self.max_total_chars and total > self.max_total_chars:
            return TOTAL_TOO_LONG
        if self.max_rounds and not agent:
            agent = any(_calls(m) is not None for m, _ in assistants if m.get("tool_calls"))
        cap = self.agent_max_rounds if agent else self.max_rounds
        if cap and min(len(users), len(assistants)) > cap:
            return TOO_MANY_ROUNDS
        return None
