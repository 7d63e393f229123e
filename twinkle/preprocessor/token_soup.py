"""TokenSoupFilter: drop conversations whose assistant output is garbled, or leaks a token.

A chat-template control token (``<|im_end|>``, ``<|eot_id|>``, an unpaired ``</s>``,
``[INST]``, ...) in a reply is a leak at any count (reason ``special_token_leak``); one in
backticks, a code block or quotes, or in a conversation whose user, system or tool text
names such tokens, is a mention and not counted.

Character classes are counted with standard-library ``re`` over whole strings (one scan
finds whether any replacement, control or private-use character is present at all).
Runs of one repeated character are found on a sample of every tenth character (a run of
20 must show there as an equal pair). Script chaos is computed with numpy on the code
points, and only for text that can hold three scripts: a lookup table maps every BMP
code point to a script bucket, so no Python loop touches individual characters.

Script chaos is measured on *script runs* (maximal stretches of letters/digits of one
script; punctuation and spaces ignored): the score is the share of windows of four
consecutive runs that contain three or more scripts, over the densest stretch of 16
windows, so a garbled tail after a long clean answer still counts. Bilingual text
alternates between two scripts and scores 0 however often it switches (Chinese or Korean
with English terms, code with CJK comments, JSON with Japanese strings); Japanese kana and
kanji count as one script, and a lone Greek letter counts as Latin (``sin α``). Garble
that jumps between Latin, Cyrillic, Arabic, Thai, Hangul and Han scores close to 1. A
table listing one word in three scripts per line would score high too: a known limit.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any

from twinkle.data_format import message_text
from twinkle.preprocessor.base import Filter, Row

TOKEN_SOUP = "token_soup"
SPECIAL_TOKEN_LEAK = "special_token_leak"
DROP_REASONS = (TOKEN_SOUP, SPECIAL_TOKEN_LEAK)

_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd\ue000-\uf8ff\U000f0000-\U0010ffff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_PRIVATE = re.compile("[\ue000-\uf8ff\U000f0000-\U0010ffff]")
_SPECIAL = re.compile(
    r"<\|[^|>\n]{1,40}\|>|</s>|\[/?(?:PAD|UNK|SEP|CLS|MASK)\]|</?(?i:unk|pad)>|<0x[0-9A-Fa-f]{2}>"
)
# Chat-template control tokens: no reply contains one unless it leaked from the template
# (``<|im_end|>``, ``<|eot_id|>``, ``<|endoftext|>``, an unpaired ``</s>``, ``[INST]``,
# ``<<SYS>>``, ``<end_of_turn>``, DeepSeek's ``<｜end▁of▁sentence｜>``). ``<s>`` alone is
# HTML strikethrough as often as a BOS token, so it never counts.
_TEMPLATE_TOKEN = re.compile(
    r"<\|[A-Za-z0-9_.:\u2581-]{1,40}\|>|<\uff5c[^\uff5c>\n]{1,40}\uff5c>|</s>|\[/?INST\]"
    r"|<</?SYS>>|<(?:start|end)_of_turn>"
)
# Code (fenced blocks and inline backticks) may quote tokens: a chat-template tutorial, a
# tokenizer config.
_CODE_SPAN = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019", "\u300c": "\u300d"}


def _leaked_tokens(text: str, context: str = "") -> int:
    """Chat-template tokens in ``text`` that are not a mention.

    A token is a mention, not a leak, when it sits in code (backticks or a fenced block) or
    between quotes, and none counts when ``context`` (the row's user, system and tool text)
    holds a template token too: the conversation is about chat templates. An ``</s>``
    after an ``<s>`` closes HTML strikethrough.

    Example:
        >>> _leaked_tokens('The answer is 42.</s>'), _leaked_tokens('Use `<|im_end|>` here.')
        (1, 0)
    """
    if not _TEMPLATE_TOKEN.search(text) or _TEMPLATE_TOKEN.search(context):
        return 0
    if "`" in text:
        text = _CODE_SPAN.sub(" ", text)
    count = 0
    for m in _TEMPLATE_TOKEN.finditer(text):
        token, start, end = m.group(), m.start(), m.end()
        before = text[start - 1 : start]
        if before in _QUOTES and text[end : end + 1] == _QUOTES[before]:
            continue
        if token == "</s>" and "<s>" in text[:start]:
            continue
        count += 1
    return count


# Letters of any script other than Latin, CJK/kana and Hangul (or anything not in the
# common punctuation and symbol blocks): only a text holding one of these, or both Hangul
# and CJK, can have three scripts and so any chaos at all.
_RARE_SCRIPT = re.compile(
    "[^\x00-\u024f\u1e00-\u1eff\u2000-\u2bff\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U0001f000-\U0001faff]"
)
_HANGUL_CHAR = re.compile("[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
_CJK_CHAR = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Characters whose long runs are ordinary: separators, rules, digits, ...
_RUN_OK = frozenset(
    " \t\n\r\x0b\x0c-=_.*+~#|><0123456789\u2013\u2014\u2015\u30fc\uff0d\u3000\u00a0"
)

_BUCKETS = (
    "",
    "latin",
    "greek",
    "cyrillic",
    "hebrew",
    "arabic",
    "devanagari",
    "thai",
    "hiragana",
    "katakana",
    "cjk",
    "hangul",
    "private",
    "other",
)


def _script_of(cp: int) -> str:
    """Script bucket of a code point (``latin`` includes ASCII digits; see the module doc)."""
    if cp <= 0x024F:
        return "latin"
    for lo, hi, name in (
        (0x0370, 0x03FF, "greek"),
        (0x0400, 0x04FF, "cyrillic"),
        (0x0590, 0x05FF, "hebrew"),
        (0x0600, 0x06FF, "arabic"),
        (0x0900, 0x097F, "devanagari"),
        (0x0E00, 0x0E7F, "thai"),
        (0x3040, 0x309F, "hiragana"),
        (0x30A0, 0x30FF, "katakana"),
        (0x4E00, 0x9FFF, "cjk"),
        (0xAC00, 0xD7A3, "hangul"),
        (0xE000, 0xF8FF, "private"),
    ):
        if lo <= cp <= hi:
            return name
    return "other"


# Buckets for chaos: scripts that are written together in ordinary text share a bucket.
_LATIN, _GREEK, _CJK, _HANGUL = 1, 2, 10, 11
_CHAOS_SPAN = 16  # windows of four runs over which chaos is averaged
_CHAOS_MERGE = {"hiragana": _CJK, "katakana": _CJK}
_EXTRA_RANGES = (  # blocks the reference table calls "other" that belong to a common script
    (0x0250, 0x02AF, _LATIN),
    (0x1E00, 0x1EFF, _LATIN),
    (0x1F00, 0x1FFF, _GREEK),
    (0xFF10, 0xFF19, _LATIN),
    (0xFF21, 0xFF3A, _LATIN),
    (0xFF41, 0xFF5A, _LATIN),
    (0x0500, 0x052F, 3),
    (0x0750, 0x077F, 5),
    (0xFB50, 0xFDFF, 5),
    (0xFE70, 0xFEFF, 5),
    (0x3005, 0x3007, _CJK),
    (0x31F0, 0x31FF, _CJK),
    (0x3400, 0x4DBF, _CJK),
    (0xF900, 0xFAFF, _CJK),
    (0xFF66, 0xFF9F, _CJK),
    (0x1100, 0x11FF, _HANGUL),
    (0x3130, 0x318F, _HANGUL),
)


@lru_cache(maxsize=1)
def _chaos_table() -> Any:
    """uint8 bucket per BMP code point; 0 for anything that is not a letter or digit."""
    import numpy as np

    table = np.zeros(0x10000, dtype=np.uint8)
    for cp in range(0x10000):
        if unicodedata.category(chr(cp))[0] in "LN":
            name = _script_of(cp)
            table[cp] = _CHAOS_MERGE.get(name, _BUCKETS.index(name))
    for lo, hi, bucket in _EXTRA_RANGES:
        letters = table[lo : hi + 1] != 0
        table[lo : hi + 1][letters] = bucket
    return table


def _codepoints(text: str) -> Any:
    import numpy as np

    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


_PAIR = re.compile(r"(.)\1", re.DOTALL)


def _long_run(text: str, min_run: int = 20) -> bool:
    """Whether some character (outside ``_RUN_OK``) repeats ``min_run`` times in a row.

    A run of ``min_run`` characters covers two consecutive multiples of ``min_run // 2``,
    so it shows as an equal adjacent pair in ``text[::min_run // 2]``: only those few
    places are checked in full.
    """
    step = max(min_run // 2, 1)
    for m in _PAIR.finditer(text[::step]):
        ch = m.group(1)
        if (
            ch in _RUN_OK
            or not ch.isprintable()
            or "\u2500" <= ch <= "\u25ff"
            or "\u2800" <= ch <= "\u28ff"
        ):
            continue  # box drawing, geometric shapes and braille draw tables and charts
        at = m.start() * step
        if ch * min_run in text[max(at - min_run, 0) : at + step + min_run]:
            return True
    return False


def _chaos_of_codepoints(cps: Any, min_chars: int) -> float:
    import numpy as np

    if cps.dtype == np.uint8:  # ASCII: one script
        return 0.0
    table = _chaos_table()
    if cps.max() > 0xFFFF:
        buckets = np.where(
            cps > 0xFFFF,
            np.where((cps >= 0x20000) & (cps <= 0x3FFFF), _CJK, 0).astype(np.uint8),
            table[cps & 0xFFFF],
        )
    else:
        buckets = table[cps]
    buckets = buckets[buckets != 0]
    if len(buckets) < min_chars:
        return 0.0
    starts = np.concatenate(([True], buckets[1:] != buckets[:-1]))
    if (buckets == _GREEK).any():
        # A lone Greek letter is a mathematical symbol (sin α, Δt): count it as Latin.
        idx = np.flatnonzero(starts)
        lengths = np.diff(np.append(idx, len(buckets)))
        lone = idx[(lengths == 1) & (buckets[idx] == _GREEK)]
        if len(lone):
            buckets = buckets.copy()
            buckets[lone] = _LATIN
            starts = np.concatenate(([True], buckets[1:] != buckets[:-1]))
    runs = buckets[starts]
    if len(runs) < 8:
        return 0.0
    third = runs[2:] != runs[:-2]  # a run whose script differs from the one two runs back
    chaotic = (third[:-1] | third[1:]).astype(np.int32)  # per window of four runs: >= 3 scripts
    if len(chaotic) <= _CHAOS_SPAN:
        return float(chaotic.mean())
    # The densest stretch of _CHAOS_SPAN windows, so garble at the end of a long, clean
    # answer is not averaged away.
    sums = np.cumsum(np.concatenate(([0], chaotic)))
    return float((sums[_CHAOS_SPAN:] - sums[:-_CHAOS_SPAN]).max()) / _CHAOS_SPAN


def _may_be_chaotic(text: str) -> bool:
    """Cheap necessary condition for chaos > 0: three scripts can be present."""
    if text.isascii():
        return False
    if _RARE_SCRIPT.search(text):
        return True
    return bool(_HANGUL_CHAR.search(text)) and bool(_CJK_CHAR.search(text))


def _script_chaos(text: str, min_chars: int = 40) -> float:
    """Share of 4-run windows holding three or more scripts, over the densest stretch of 16
    such windows (0.0 below ``min_chars`` letters or 8 runs).

    Example:
        >>> ja = '日本語の文章はひらがなとカタカナと漢字を混ぜて書きます。Pythonで処理します。'
        >>> _script_chaos(ja * 3)
        0.0
        >>> _script_chaos('ção фл 的 ساعة ภาษา 치 ления ▁the ção 的な ساعة ภาษ ' * 4) > 0.9
        True
    """
    if not text or not _may_be_chaotic(text):
        return 0.0
    return _chaos_of_codepoints(_codepoints(text), min_chars)


def _char_ratios_soup(
    text: str,
    replacement_char_ratio: float,
    control_char_ratio: float,
    private_use_ratio: float,
    special_token_count: int,
) -> bool:
    n = max(len(text), 1)
    if _BAD_CHARS.search(text):
        if text.count("\ufffd") / n > replacement_char_ratio:
            return True
        if len(_CONTROL.findall(text)) / n > control_char_ratio:
            return True
        if len(_PRIVATE.findall(text)) / n > private_use_ratio:
            return True
    return ("<" in text or "[" in text) and len(_SPECIAL.findall(text)) >= special_token_count


def _is_token_soup(
    text: str,
    replacement_char_ratio: float = 0.02,
    control_char_ratio: float = 0.01,
    private_use_ratio: float = 0.03,
    special_token_count: int = 20,
    script_chaos_threshold: float = 0.55,
    script_chaos_min_chars: int = 40,
    max_chars: int = 0,
) -> bool:
    """Whether ``text`` is garbled: bad characters, leaked special tokens, one character
    repeated 20+ times, or script chaos above the threshold (ratios use a strict ``>``).

    Example:
        >>> _is_token_soup('<unk>' * 25)
        True
        >>> _is_token_soup('東京の天気は晴れです。Seoul은 맑습니다.')
        False
    """
    if not text:
        return False
    if max_chars and len(text) > max_chars:
        text = text[:max_chars]
    if _char_ratios_soup(
        text, replacement_char_ratio, control_char_ratio, private_use_ratio, special_token_count
    ):
        return True
    if _long_run(text):
        return True
    return (
        _may_be_chaotic(text)
        and _chaos_of_codepoints(_codepoints(text), script_chaos_min_chars) > script_chaos_threshold
    )


class TokenSoupFilter(Filter):
    """Drop conversations with garbled assistant output (drop reason ``token_soup``).

    Args:
        replacement_char_ratio: share of U+FFFD above which a reply is soup.
        control_char_ratio: share of control characters (tab/LF/CR allowed).
        private_use_ratio: share of private-use characters.
        special_token_count: this many leaked special tokens (``<|...|>``, ``</s>``,
            ``[PAD]``, ``<unk>``, ``<0x0A>``, ...) make a reply soup.
        script_chaos_threshold: script-chaos score above which a reply is soup.
        script_chaos_min_chars: letters needed before chaos is scored.
        max_chars: examine only this many characters per reply (0 = all).
        template_token_count: this many leaked chat-template tokens (``<|im_end|>``,
            ``<|eot_id|>``, ``<|endoftext|>``, an unpaired ``</s>``, ``[INST]``, ...) drop a
            row with ``special_token_leak``; 0 turns the check off. One is enough: no reply
            writes a template token except by leaking it. Mentions are not leaks: a token
            in backticks or a code block or in quotes is not counted, and none is when the
            user, system or tool text of the row holds one too (a conversation about chat
            templates).

    Every assistant reply (content and reasoning) is checked. Ordinary Japanese (kana and
    kanji), Korean, code, URLs and JSON are not soup.

    Example:
        >>> garble = 'ção фл 的 ساعة ภาษา 치 ления ▁the ção 的な ساعة ภาษ ' * 4
        >>> rows = [{'messages': [{'role': 'user', 'content': 'Summarise the log for me.'},
        ...                       {'role': 'assistant', 'content': garble}]}]
        >>> TokenSoupFilter()(rows)[1][0]['drop_reason']
        'token_soup'
    """

    def __init__(
        self,
        replacement_char_ratio: float = 0.02,
        control_char_ratio: float = 0.01,
        private_use_ratio: float = 0.03,
        special_token_count: int = 20,
        script_chaos_threshold: float = 0.55,
        script_chaos_min_chars: int = 40,
        max_chars: int = 0,
        template_token_count: int = 1,
    ) -> None:
        for name, value in (
            ("replacement_char_ratio", replacement_char_ratio),
            ("control_char_ratio", control_char_ratio),
            ("private_use_ratio", private_use_ratio),
            ("script_chaos_threshold", script_chaos_threshold),
        ):
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        for name, value in (
            ("special_token_count", special_token_count),
            ("script_chaos_min_chars", script_chaos_min_chars),
            ("max_chars", max_chars),
            ("template_token_count", template_token_count),
        ):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        self.replacement_char_ratio = replacement_char_ratio
        self.control_char_ratio = control_char_ratio
        self.private_use_ratio = private_use_ratio
        self.special_token_count = special_token_count
        self.script_chaos_threshold = script_chaos_threshold
        self.script_chaos_min_chars = script_chaos_min_chars
        self.max_chars = max_chars
        self.template_token_count = template_token_count

    def check(self, row: Row) -> str | None:
        pieces = []
        for msg in row["messages"]:
            if not isinstance(msg, dict) or msg.get("role") != "assistant":
                continue
            for text in (message_text(msg), msg.get("reasoning_content"), msg.get("thinking")):
                if not isinstance(text, str):
                    continue
                text = text.strip()
                if not text:
                    continue
                if self.max_chars and len(text) > self.max_chars:
                    text = text[: self.max_chars]
                if _char_ratios_soup(
                    text,
                    self.replacement_char_ratio,
                    self.control_char_ratio,
                    self.private_use_ratio,
                    self.special_token_count,
                ):
                    return TOKEN_SOUP
                pieces.append(text)
        if not pieces:
            return None
        if self.template_token_count and any(
            ("<" in p or "[" in p) and _TEMPLATE_TOKEN.search(p) for p in pieces
        ):
            context = "\n".join(
                message_text(m)
                for m in row["messages"]
                if isinstance(m, dict) and m.get("role") != "assistant"
            )
            if sum(_leaked_tokens(p, context) for p in pieces) >= self.template_token_count:
                return SPECIAL_TOKEN_LEAK
        # Character runs over all replies at once; the newline that joins them ends any
        # run. Chaos per reply, and only where three scripts can occur.
        joined = pieces[0] if len(pieces) == 1 else "\n".join(pieces)
        if _long_run(joined):
            return TOKEN_SOUP
        for piece in pieces:
            if (
                len(piece) >= self.script_chaos_min_chars
                and _may_be_chaotic(piece)
                and _chaos_of_codepoints(_codepoints(piece), self.script_chaos_min_chars)
                > self.script_chaos_threshold
            ):
                return TOKEN_SOUP
        return None
