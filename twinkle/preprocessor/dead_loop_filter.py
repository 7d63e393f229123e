"""DeadLoopFilter: drop assistants stuck in hesitation, correction cascades or repetition.

Speed comes from the standard library's ``re`` used the way its engine is fast: every
pattern starts with a literal (or a small set of literal first characters), so the search
jumps through the text in C instead of trying an alternation at each position. One scan
over all assistant text of a row decides whether the marker tests can fire at all, so a
clean row pays for one scan, not one per turn. N-gram repetition is counted with a set of
word tuples for short segments and with hashes in numpy (imported on first use) for long
or CJK ones, after a cheap bound (distinct words, or a dozen sampled n-grams) has ruled
out most clean segments.

Each assistant turn is split into its reasoning (inline ``<think>`` blocks plus
``reasoning_content``/``thinking``) and its visible response (all text outside the blocks,
including text before the first block). Reasoning is judged with the laxer ``think_*``
profile, the response with the strict one.

Drop reasons: ``dead_loop``, ``tool_call_loop``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from twinkle.data_format import message_text, normalize_tool_calls, split_think
from twinkle.preprocessor.base import Filter, Row

DEAD_LOOP = "dead_loop"
TOOL_CALL_LOOP = "tool_call_loop"
DROP_REASONS = (DEAD_LOOP, TOOL_CALL_LOOP)

# English markers, on lower-cased text. Every pattern starts with a literal, so ``re``
# jumps between occurrences in C (as fast as ``in``), and one scan per core word yields
# both the hesitation markers and the correction-cascade markers. A match counts only at
# a word start (checked on the one character before it).
_EN_WAIT = re.compile(
    r"wait\b(?P<h>[ ,]*\.{2,}|[ ,]+(?:wait|no|actually|hmm|let)\b|,\s*(?:that|this)\b)?"
)
_EN_HMM = re.compile(r"hmm(?P<h>m*)\b")
_EN_ACTUALLY = re.compile(r"actually\b(?P<h>,? (?:no|wait|i was)\b)?")
_EN_I = re.compile(  # hesitation (h) or, for "i was wrong"/"i made a mistake", cascade only (c)
    r"i(?:(?P<h>'?ll (?:start over|try again|redo this)"
    r"|'?m (?:getting confused|going in circles|lost here|not sure where)"
    r"| keep (?:making|getting) (?:the same )?(?:errors?|mistakes?)"
    r"| (?:made|keep making) (?:the same )?(?:mistake|error) again)"
    r"|(?P<c> was wrong| made an? (?:error|mistake))\b)"
)
_EN_OTHER = [
    re.compile(p)
    for p in (  # hesitation only
        r"uhh*m*\b",
        r"no, actually,? (?:that|this|i)\b",
        r"let me (?:re-?think|try again|start over|reconsider)",
        r"this is (?:getting|becoming) (?:messy|complicated fast|circular)",
    )
]
_WAIT_LEAD = ("no ", "no, ", "oh ", "oh, ", "but ")


def _word_start(low: str, i: int) -> bool:
    return i == 0 or not low[i - 1].isalnum()


def _en_markers(low: str) -> tuple[list[int], list[int]]:
    """``(hesitation, cascade)`` start offsets of the English markers in ``low``."""
    hes: list[int] = []
    cas: list[int] = []
    for m in _EN_WAIT.finditer(low):
        i = m.start()
        if _word_start(low, i):
            cas.append(i)
            if m.group("h") or low[max(i - 5, 0) : i].endswith(_WAIT_LEAD):  # "no wait", "oh, wait"
                hes.append(i)
    for m in _EN_HMM.finditer(low):
        i = m.start()
        if _word_start(low, i):
            hes.append(i)
            if not m.group("h"):  # exactly "hmm" is a cascade marker, "hmmm" is not
                cas.append(i)
    for m in _EN_ACTUALLY.finditer(low):
        i = m.start()
        if _word_start(low, i):
            cas.append(i)
            if m.group("h"):
                hes.append(i)
    for m in _EN_I.finditer(low):
        i = m.start()
        if _word_start(low, i):
            (hes if m.group("h") else cas).append(i)
    for pattern in _EN_OTHER:
        hes.extend(i for i in (m.start() for m in pattern.finditer(low)) if _word_start(low, i))
    return hes, cas


# Chinese, Japanese and Korean markers in one alternation whose branches all begin with a
# literal character: ``re`` then scans with a first-character set.
_CJK_HESITATION = re.compile(
    # zh
    r"等等|哦等等|不不不不*|嗯嗯嗯*|呃呃*|不对[，,。！!\s]*(?:等等|重新|让我)|错了[，,。！!\s]*让我"
    r"|让我(?:重新|再次|再)(?:想|试|来|考虑|计算)|我(?:再|重新)(?:想想|试试|来一次|考虑)"
    r"|我(?:越来越|有点)?(?:搞不清楚?|不确定|迷糊了?|乱了?)|这(?:变得|太|越来越)(?:复杂|乱|难以?理清)"
    r"|我(?:好像|似乎|又)(?:搞|弄)错了?|我(?:又犯|再次犯)了?错|一直(?:出错|犯错|搞错)"
    # ja
    r"|ちょっと待って|待って待って|いや待って|えっと+|うーん+|あれ[、。！!？?]+(?:また|もう一度)"
    r"|もう一度考え直|やり直し|混乱してきた|わからなくなって"
    # ko: 음/어 only as interjections (alone, repeated, or before punctuation/end); the
    # syllable before them is checked in code so 다음/있어 never count.
    r"|잠깐만?요?|아 잠깐|음[음어]*(?=\s*(?:[.…,~!?\x00]|$))|어[음어]*(?=\s*(?:[.…,~!?\x00]|$))"
    r"|다시 ?(?:생각|시작|해보|해야)|헷갈(?:리기|리네|려서)|계속 ?(?:틀리|실수|잘못)"
)
_CJK_CASCADE = re.compile(r"等等|不对|重新|错了|嗯嗯|让我再|ちょっと待って|いや待って|잠깐|틀렸")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")


def _markers(low: str) -> tuple[list[int], list[int]]:
    """Sorted ``(hesitation, cascade)`` marker offsets in lower-cased text, all languages."""
    hes, cas = _en_markers(low)
    if not low.isascii():
        for m in _CJK_HESITATION.finditer(low):
            i = m.start()
            if low[i] in "음어" and i and _HANGUL.match(low, i - 1):
                continue
            hes.append(i)
        cas.extend(m.start() for m in _CJK_CASCADE.finditer(low))
    hes.sort()
    cas.sort()
    return hes, cas


# Joins a row's segments for the one-pass marker scan; no marker pattern can match across it.
_SEP = "\n\x00\n"


def _fold(text: str) -> str:
    """Lower-case, with curly apostrophes made straight, for the English patterns."""
    low = text.lower()
    return low.replace("\u2019", "'") if "\u2019" in low else low


def _max_in_window(pos: list[int], window: int) -> int:
    """Most positions that fit in any span of ``window`` characters."""
    best = lo = 0
    for hi, p in enumerate(pos):
        while p - pos[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _is_cjk(text: str) -> bool:
    """``cjk_ratio(text[:500]) > 0.3``, estimated from the UTF-8 length in one C call.

    CJK characters take three UTF-8 bytes, so the extra bytes over the character count are
    about twice the CJK characters; this avoids a regex scan per segment.
    """
    head = text[:500]
    if head.isascii():
        return False
    extra = len(head.encode("utf-8", "surrogatepass")) - len(head)
    visible = len(head) - head.count(" ") - head.count("\n")
    return visible > 0 and extra / 2 / visible > 0.3


def _repetition(text: str, n: int, min_words: int, threshold: float = 0.0) -> float:
    """Share of repeated n-grams: words for Latin text, characters for CJK text.

    With ``threshold``, a text that provably cannot exceed it returns 0.0 early.
    """
    if len(text) < min_words * 2 - 1:  # too short for ``min_words`` words, let alone CJK grams
        return 0.0
    if not _is_cjk(text):
        words = text.split()
        if len(words) < min_words or len(words) < n:
            return 0.0
        total = len(words) - n + 1
        # Every gram that starts at a word's first occurrence is new, so at most
        # total - (distinct - n + 1) grams repeat: with many distinct words, no loop.
        if threshold and total - (len(set(words)) - n + 1) <= threshold * total:
            return 0.0
        if len(words) < 600:  # small: a set of word tuples is cheaper than numpy's set-up
            return 1.0 - len(set(zip(*(words[i:] for i in range(n))))) / total
        return _hashed_repetition(" ".join(words), n)
    compact = "".join(text.split())
    if len(compact) < min_words * n:
        return 0.0
    # Screen: a segment above the threshold has most of its n-grams occurring twice, so
    # most of a dozen evenly spaced samples do; a clean text may repeat a path or two.
    # Fewer than three repeating samples skips the exact count.
    step = max((len(compact) - n) // 12, 1)
    if sum(compact.count(compact[p : p + n]) > 1 for p in range(0, len(compact) - n + 1, step)) < 3:
        return 0.0
    return _char_repetition(compact, n)


def _char_repetition(compact: str, n: int) -> float:
    """Repeated character n-grams, each gram hashed from lanes of three packed code points."""
    import numpy as np

    cps = np.frombuffer(compact.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(
        np.uint64
    )
    m = len(cps) - n + 1
    grams = np.zeros(m, dtype=np.uint64)
    for lane in range(0, n, 3):  # a code point has 21 bits: three fit in 63
        packed = cps[lane : lane + m].copy()
        for j in range(lane + 1, min(lane + 3, n)):
            packed = (packed << np.uint64(21)) | cps[j : j + m]
        grams = grams * np.uint64(0x9E3779B97F4A7C15) ^ packed
    return 1.0 - len(np.unique(grams)) / m


def _hashed_repetition(compact: str, n: int) -> float:
    """Repeated word n-grams of space-joined words, by prefix hashes over the code points."""
    import numpy as np  # only needed for long segments; keeps ``import`` of the filter light

    cps = np.frombuffer(compact.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(
        np.uint64
    )
    starts = np.concatenate(([0], np.flatnonzero(cps == 32) + 1, [len(cps) + 1]))
    cps = np.concatenate((cps, np.full(1, 32, dtype=np.uint64)))  # a final space ends the last word
    # Prefix hashes mod 2**64 (uint64 wraps): h(s, e) = (P[e] - P[s]) * B**-s.
    base = np.uint64(0x100000001B3)
    inv = np.uint64(pow(int(base), -1, 1 << 64))
    size = len(cps)
    powers = np.full(size, base, dtype=np.uint64)
    powers[0] = 1
    powers = np.cumprod(powers, dtype=np.uint64)
    inv_powers = np.full(size + 1, inv, dtype=np.uint64)
    inv_powers[0] = 1
    inv_powers = np.cumprod(inv_powers, dtype=np.uint64)
    prefix = np.concatenate(
        (np.zeros(1, dtype=np.uint64), np.cumsum(cps * powers, dtype=np.uint64))
    )
    s, e = starts[:-n], starts[n:]
    grams = (prefix[e] - prefix[s]) * inv_powers[s]
    return 1.0 - len(np.unique(grams)) / len(grams)


@dataclass(frozen=True, slots=True)
class _Profile:
    density: float
    cascade: int
    repetition: float


class DeadLoopFilter(Filter):
    """Drop conversations whose assistant hesitates, self-corrects in cascades or loops.

    A text segment is *stuck* when one of these holds:
    - at least ``min_hesitation_markers`` hesitation markers (EN/ZH/JA/KO: "wait...",
      "hmm", 等等, 让我重新想, えっと, うーん, 잠깐, 음... as an interjection) and more than
      the profile's density of markers per 1000 characters;
    - ``cascade`` or more correction markers within ``cascade_window`` characters;
    - the share of repeated ``ngram_size``-grams exceeds the profile's repetition ratio
      (words, or characters for CJK; only with ``ngram_min_words`` words /
      ``ngram_min_words * ngram_size`` characters or more).

    Reasoning uses the ``think_*`` profile, the visible response the strict one. A plain
    row is dropped (``dead_loop``) when any assistant turn is stuck; an agent row (one that
    uses tools) when at least ``agent_min_stuck_turns`` turns are stuck (default 1: the
    same loop is a loop with or without tools around it; the seed's 2 let every agent row
    with one looping reply through), or, when ``max_repeated_turn_texts`` is set, when the
    assistant says the same thing (``min_repeated_text_chars`` or more characters) in that
    many turns, each too short to loop on its own (off by default: agents repeat "Now let
    me verify the result." legitimately). It is dropped with ``tool_call_loop`` when the
    same tool calls with the same arguments get the same outputs
    ``max_repeated_tool_calls`` times.

    Example:
        >>> loop = 'Wait... no wait, hmm. Actually no. Hmm, let me try again. Wait, that is wrong. '
        >>> loop *= 3
        >>> rows = [{'messages': [{'role': 'user', 'content': 'Compute 17*23.'},
        ...                       {'role': 'assistant', 'content': loop}]}]
        >>> DeadLoopFilter()(rows)[1][0]['drop_reason']
        'dead_loop'
    """

    def __init__(
        self,
        hesitation_density_threshold: float = 7.0,
        cascade_window: int = 800,
        cascade_threshold: int = 5,
        repetition_threshold: float = 0.45,
        ngram_size: int = 8,
        ngram_min_words: int = 30,
        think_hesitation_density_threshold: float = 15.0,
        think_cascade_threshold: int = 20,
        think_repetition_threshold: float = 0.65,
        agent_min_stuck_turns: int = 1,
        min_hesitation_markers: int = 3,
        max_repeated_tool_calls: int = 4,
        max_repeated_turn_texts: int = 0,
        min_repeated_text_chars: int = 20,
    ) -> None:
        for name, value in (
            ("cascade_window", cascade_window),
            ("cascade_threshold", cascade_threshold),
            ("ngram_size", ngram_size),
            ("ngram_min_words", ngram_min_words),
            ("think_cascade_threshold", think_cascade_threshold),
            ("agent_min_stuck_turns", agent_min_stuck_turns),
            ("min_hesitation_markers", min_hesitation_markers),
            ("max_repeated_tool_calls", max_repeated_tool_calls),
            ("min_repeated_text_chars", min_repeated_text_chars),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.cascade_window = cascade_window
        self.ngram_size = ngram_size
        self.ngram_min_words = ngram_min_words
        self.agent_min_stuck_turns = agent_min_stuck_turns
        self.min_hesitation_markers = min_hesitation_markers
        self.max_repeated_tool_calls = max_repeated_tool_calls
        if not isinstance(max_repeated_turn_texts, int) or max_repeated_turn_texts < 0:
            raise ValueError(
                "max_repeated_turn_texts must be a non-negative int, "
                f"got {max_repeated_turn_texts!r}"
            )
        self.max_repeated_turn_texts = max_repeated_turn_texts
        self.min_repeated_text_chars = min_repeated_text_chars
        self.response_profile = _Profile(
            hesitation_density_threshold, cascade_threshold, repetition_threshold
        )
        self.think_profile = _Profile(
            think_hesitation_density_threshold, think_cascade_threshold, think_repetition_threshold
        )

    def segment_stuck(self, text: str, think: bool = False, markers: bool = True) -> bool:
        """Whether one response (or, with ``think=True``, reasoning) segment is stuck.

        ``markers=False`` skips the marker tests (the caller knows there are too few).
        """
        if not text:
            return False
        profile = self.think_profile if think else self.response_profile
        if markers:
            low = _fold(text)
            pos, cascade = _markers(low)
            if len(pos) >= self.min_hesitation_markers:
                # Density over the whole segment, or over its densest window when the segment
                # is long, so a loop at the end of a long, clean answer is not diluted away.
                if len(low) <= self.cascade_window:
                    count, span = len(pos), len(low)
                else:
                    count, span = _max_in_window(pos, self.cascade_window), self.cascade_window
                if count >= self.min_hesitation_markers and count * 1000.0 / span > profile.density:
                    return True
            k = profile.cascade
            if len(cascade) >= k and _max_in_window(cascade, self.cascade_window) >= k:
                return True
        return (
            _repetition(text, self.ngram_size, self.ngram_min_words, profile.repetition)
            > profile.repetition
        )

    def _markers_possible(self, texts: list[str], think: bool) -> bool:
        # One scan over all segments of a row: if the row as a whole has too few markers,
        # no single segment can have enough, and the per-segment marker tests are skipped.
        if not texts:
            return False
        hes, cascade = _markers(_fold(_SEP.join(texts)))
        k = (
            min(self.response_profile.cascade, self.think_profile.cascade)
            if not think
            else self.think_profile.cascade
        )
        return len(hes) >= self.min_hesitation_markers or len(cascade) >= k

    def _segments(self, msg: dict[str, Any]) -> tuple[str, str]:
        """``(reasoning, response)`` of an assistant message."""
        response, inline = split_think(message_text(msg))
        reasoning = [inline] if inline else []
        for key in ("reasoning_content", "thinking"):
            value = msg.get(key)
            if isinstance(value, str) and value.strip():
                reasoning.append(value.strip())
        return "\n".join(reasoning), response.strip()

    def check(self, row: Row) -> str | None:
        agent = False
        turns: list[tuple[str, str]] = []
        steps: dict[str, int] = {}  # (tool calls, their outputs) -> times seen
        step: list[str] | None = None
        for msg in row["messages"]:
            if not isinstance(msg, dict):
                continue
            role = msg.get("role")
            if role == "tool":
                agent = True
                if step is not None:
                    step.append(message_text(msg))
                continue
            if role != "assistant":
                continue
            if step is not None and self._repeats(steps, step):
                return TOOL_CALL_LOOP
            calls = normalize_tool_calls(msg)
            step = None
            if calls is not None:
                agent = True
                step = [
                    f"{fn.get('name')}\x01{fn.get('arguments')}"
                    for fn in (
                        c.get("function") if isinstance(c.get("function"), dict) else {}
                        for c in calls
                    )
                ]
            turns.append(self._segments(msg))
        if step is not None and self._repeats(steps, step):
            return TOOL_CALL_LOOP
        if not turns:
            return None
        repeats = self.max_repeated_turn_texts
        if agent and repeats and len(turns) >= repeats and self._repeats_text(turns):
            return DEAD_LOOP
        # One scan of the whole row decides whether the marker tests can fire at all; only
        # a row with markers pays for the per-kind and per-segment scans.
        think_markers = response_markers = False
        if self._markers_possible([x for turn in turns for x in turn if x], think=False):
            think_markers = self._markers_possible([t for t, _ in turns if t], think=True)
            response_markers = self._markers_possible([r for _, r in turns if r], think=False)
        need = self.agent_min_stuck_turns if agent else 1
        stuck = 0
        for think, response in turns:
            if self.segment_stuck(think, True, think_markers) or self.segment_stuck(
                response, False, response_markers
            ):
                stuck += 1
                if stuck >= need:
                    return DEAD_LOOP
        return None

    def _repeats_text(self, turns: list[tuple[str, str]]) -> bool:
        # An agent that says the same sentence turn after turn ("Let me run the tests again
        # to check.") while its calls change a little: each turn is too short to loop alone.
        seen: dict[str, int] = {}
        for _, response in turns:
            if len(response) < self.min_repeated_text_chars:
                continue
            key = " ".join(response.lower().split())
            seen[key] = seen.get(key, 0) + 1
            if seen[key] >= self.max_repeated_turn_texts:
                return True
        return False

    def _repeats(self, steps: dict[str, int], step: list[str]) -> bool:
        # The same calls getting the same outputs again and again: the agent is not
        # learning anything from its tools.
        key = "\x00".join(step)
        steps[key] = steps.get(key, 0) + 1
        return steps[key] >= self.max_repeated_tool_calls
