"""RefuseFilter: drop conversations whose assistant refuses the task (EN/ZH/JA/KO).

Standard-library ``re`` patterns over the opening window of the first assistant reply;
curly apostrophes are folded to ``'`` once so contractions ("I’m not able to") match.
A refusal that turns into help ("I can't run it here, but let me write the script
instead", "I can't draw it, so here is the data", "……不过，……") is a partial decline and is
kept; what follows the continuation word must not be another refusal ("I'm sorry, but I
can't help with that request." three times) or a polite close ("but I hope you
understand"). A short reply that opens with an apology and "I cannot ..." is a non-answer
whatever its verb. Whether a tool-grounded assistant that scopes itself to its tools ("my
functions are limited to X") refuses is a policy: ``capability_statements``.
"""

from __future__ import annotations

import re

from twinkle.data_format import THINK_BLOCK_RE, message_text
from twinkle.preprocessor.base import Filter, Row

REFUSAL = "refusal"
DROP_REASONS = (REFUSAL,)

_IS = re.IGNORECASE | re.DOTALL
# Task verbs by stem, so "helping", "provided" and "generation" match too.
_TASK_VERB = (
    r"(?:help|assist|answer|respond|provid|generat|creat|produc|fulfil|comply|complied|address"
    r"|process|complet|handl|discuss|support|shar|engag|participat|go along|give you"
    r"|do (?:that|this|it|so)|writ(?:e|ing) (?:that|this|it))\w*"
)
# Gaps between the parts of a pattern stay inside one clause: "I cannot see the file yet,
# so I will create it" is not a refusal.
_GAP = r"(?:(?!\b(?:so|but|and|because|then|until|unless|since|which)\b)[^.;:!?\n])"
_EN_CORE = re.compile(
    r"\b(?:i|we)\b"
    + _GAP
    + r"{0,25}?\b(?:can'?t|cannot|can not|won'?t|will not|wouldn'?t|would not"
    r"|am not able|are not able|'m not able|'re not able|am unable|are unable|'m unable|'re unable"
    r"|must decline|have to decline|decline to|refuse to|am not going to|'m not going to"
    r"|am not (?:allowed|permitted|authorized|comfortable)"
    r"|'m not (?:allowed|permitted|authorized|comfortable)"
    r"|are not (?:allowed|permitted|authorized)|'re not (?:allowed|permitted|authorized))\b"
    + _GAP
    + r"{0,60}?\b"
    + _TASK_VERB
    + r"\b",
    _IS,
)
_EN_APOLOGY = re.compile(
    r"(?:\bi'?m sorry|\bi am sorry|\bsorry\b|\bi apologi[sz]e|\bunfortunately|\bi regret)\b"
    r"[^.!?\n]{0,80}?"
    r"\b(?:can'?t|cannot|unable|won'?t|will not|must decline|have to decline|not allowed|not able"
    r"|not comfortable|not appropriate)\b" + _GAP + r"{0,40}?\b" + _TASK_VERB + r"\b",
    _IS,
)
_EN_POLICY = re.compile(
    r"\b(?:this|that|your|the) (?:request|question|prompt|content|topic|task)\b.{0,60}?"
    r"\b(?:violates?|go(?:es)? against|is inappropriate"
    r"|is not (?:appropriate|allowed|permitted|something i can))",
    _IS,
)
_EN_STANDALONE = re.compile(
    r"\b(?:i|we) (?:must|have to|am going to|need to) (?:decline|refuse)\b"
    r"|\b(?:i|we) (?:decline|refuse) (?:this|your|to)\b"
    r"|\bthis (?:falls outside|is outside|is beyond) (?:what i|my)\b"
    r"|\b(?:that|this|it)(?:'s| is) not something (?:i|we) (?:can|am able to|will|could)\b"
    r"|\bi'?m afraid (?:i|we) (?:can'?t|cannot|won'?t)\b"
    r"|\bas an ai\b[,.]? i (?:can'?t|cannot|am not able|won'?t)\b.{0,40}?\b" + _TASK_VERB + r"\b",
    _IS,
)
_ZH = re.compile(
    r"(?:非常|十分|很|极为)?抱歉[，,\s]{0,5}[^。！？!?\n]{0,40}?(?:无法|不能|不可以|不便|没有办法)"
    r"(?:为您|为你|帮您|帮你|向您|给您)?(?:帮|协助|提供|回答|满足|完成|处理|执行|生成|参与|回复|解答|支持|答应|讨论)"
    r"|对不起[，,\s]{0,5}[^。！？!?\n]{0,40}?(?:无法|不能|不可以|不便)(?:为您|为你|帮您|帮你)?"
    r"(?:帮|协助|提供|回答|满足|完成|处理|执行|生成|参与|回复|解答|支持)"
    r"|(?:我|这个我|这我)(?:帮不了|帮不上)|我没法(?:帮|协助|提供|回答|完成|处理)|超出了我(?:能|可以)?(?:帮助|协助|回答|处理)的?范围"
    r"|我(?:无法|不能|不可以|没有办法|不便|不适合|不被允许|不被授权)[^，。,.;；！!？?\n]{0,30}?"
    r"(?:帮|回答|提供|生成|处理|协助|完成|执行|回复|解答|满足)"
    r"|(?:您的|你的|这个|该|此)(?:请求|问题|内容|话题|要求).{0,20}?(?:违反|不当|不合适|超出我|超出了我)"
    r"|作为(?:AI|人工智能|语言模型|大模型|一个AI|一个人工智能)[，,].{0,30}?(?:无法|不能|不便|不应该|不适合).{0,20}?"
    r"(?:帮|回答|提供|生成|处理|协助|完成|执行|回复|解答|讨论|参与|评论|创作|输出)",
    re.DOTALL,
)
_JA = re.compile(
    r"(?:申し訳(?:ありません|ございません)|恐れ入ります|すみません)(?:が|けれど|けど)[、,\s]?[^。！？!?\n]{0,40}?"
    r"(?:できません|お答えできません|対応できません|お手伝いできません|お応えできません|いたしかねます|致しかねます)"
    r"|(?:回答|対応|お答え|お手伝い|協力)(?:する|いたす|致す)?こと(?:は|が)?できません"
    r"|ご要望に(?:は)?お(?:応え|答え)(?:できません|いたしかねます)"
    r"|お(?:受け|引き受け)(?:できません|いたしかねます|致しかねます)|お手伝い(?:は|することは)?できません"
    r"|(?:その|この)(?:リクエスト|質問|依頼|ご依頼|要求).{0,20}?(?:お断り|辞退|対応できません|お応えできません)",
    re.DOTALL,
)
_KO = re.compile(
    r"(?:죄송하지만|죄송합니다만|죄송합니다[,.]?|유감스럽게도|유감이지만)[^.!?\n]{0,40}?"
    r"(?:도와\s?드릴 수 없|드릴 수 없|도움을 드릴 수 없|응할 수 없|도와드리기 어렵"
    r"|지원할 수 없|수행할 수 없"
    r"|제공할 수 없|처리할 수 없|답변할 수 없|못합니다|불가능합니다)"
    r"|(?:답변|도움|처리|제공|지원)(?:을|를)?\s?(?:드리기|하기|해\s?드리기)"
    r"\s?(?:어렵|불가|할 수 없)"
    r"|(?:요청|질문|내용|부탁|작업)(?:은|는|을|를|에|에는)?.{0,20}?"
    r"(?:거절|거부|응할 수 없|들어드릴 수 없"
    r"|도와\s?드리기\s?(?:어렵|곤란)|도와\s?드릴 수 없)"
    r"|도와\s?드리기\s?(?:어렵|곤란)합니다"
    r"|(?:도와|제공해|답변해|처리해)\s?드릴 수 없(?:습니다|어요|네요)",
    re.DOTALL,
)
# A short reply that opens with an apology and an inability is a non-answer whatever the
# verb ("I'm sorry, I cannot retrieve that information without ..."). Not for verbs that
# report a result ("I'm sorry, I can't find any flights on that date"), and not when a
# long reply follows (``_OPENING_REST``): that is an answer with a caveat.
_EN_OPENING = re.compile(
    r"^\W{0,3}(?:i'?m sorry|i am sorry|sorry|i apologi[sz]e|unfortunately|i'?m afraid"
    r"|regrettably)\b[^.!?\n]{0,60}?\bi(?:'m| am)?\s+"
    r"(?:can'?t|cannot|can not|won'?t be able to|will not be able to|(?:am )?unable to"
    r"|(?:am )?not able to|do(?:n'?t| not) have (?:the )?(?:ability|access|capability"
    r"|capabilities|means|permission)|lack (?:the )?(?:ability|access|capability))\b"
    r"(?!\s+(?:find|see|locate|reproduce|spot|detect|recall|remember|believe)\b)",
    _IS,
)
_OPENING_REST = {True: 100, False: 250}  # characters after the opening sentence (CJK, not)
# The same for Chinese, Japanese and Korean: an opening apology, then "cannot" with any verb.
_CJK_OPENING = re.compile(
    r"^\s*(?:非常|十分|很)?(?:抱歉|对不起|不好意思)[，,！!。\s]{0,3}[^。！？!?\n]{0,20}?"
    r"(?:无法|不能|没法|没有办法|做不到)"
    r"|^\s*(?:申し訳(?:ありません|ございません)|すみません|ごめんなさい)(?:が|けれど|けど)?[、,\s]?"
    r"[^。！？!?\n]{0,40}?(?:できません|いたしかねます|致しかねます)"
    r"|^\s*(?:죄송하지만|죄송합니다만?|유감스럽게도|미안하지만)[,.\s]{0,3}[^.!?\n]{0,50}?"
    r"(?:할 수 없|드릴 수 없|수 없습니다|어렵습니다|불가능합니다)",
)
_PATTERNS = (
    _EN_CORE,
    _EN_APOLOGY,
    _EN_POLICY,
    _EN_STANDALONE,
    _EN_OPENING,
    _ZH,
    _JA,
    _KO,
    _CJK_OPENING,
)
_N_EN = 5  # the English patterns open _PATTERNS
# A refusal that goes on to help ("I can't draw it, so here is the data: ...", "..., but
# let me write a script instead", "……不过，……") is a partial decline, not a refusal.
_CONTINUATION = re.compile(
    r"\binstead\b|\b(?:but|however|though),? (?:i|we|let me|let's|here|you can)\b"
    r"|\bso here(?:'s| is| are)\b|\bhere(?:'s| is| are) (?:a|an|the|some|what|how|my)\b"
    r"|\bbelow (?:is|are)\b|\bthat said\b|\bin the meantime\b|\bwhat i can do\b"
    r"|(?:^|[.;:]\s*)(?:let me|let's|i'll|i can) (?!know)"
    r"|不过|但是?我?(?:可以|能)|以下是|下面是|这里是|改用|让我|我来|可以(?:给|为|帮)你"
    r"|代わりに|その代わり|ただし|ですが、|以下(?:に|は|の)|次の|대신|하지만|다만|아래",
    re.IGNORECASE,
)
# What follows a continuation word without being an answer: a polite close, a pointer
# elsewhere, an offer to help with something else.
_BOILERPLATE = re.compile(
    r"hope (?:you|this|that)|appreciate|understand|(?:something|anything) else"
    r"|other (?:questions?|topics?|tasks?|requests?|things)|feel free|let me know|consult"
    r"|contact|reach out|seek|professional|please (?:ask|try|rephrase)|explain why"
    r"|其他|别的|理解|谅解|咨询|联系|请.{0,4}(?:问|尝试)|他の|ほかの|ご理解|ご了承|相談|お問い合わせ"
    r"|다른|양해|이해|문의|상담",
    re.IGNORECASE,
)
# "My functions are limited to X": a tool-grounded assistant scoping itself to its tools.
_CAPABILITY = re.compile(
    r"\bmy (?:current |available )?(?:functions?|capabilities|tools?|abilities)"
    r" (?:are|is) (?:currently )?(?:limited|restricted) to\b"
    r"|\bi (?:only )?have access to (?:a |the |one )?(?:\w+ )?(?:functions?|tools?)\b"
    r"|\b(?:functions?|tools?) (?:i have|available to me|(?:that )?i(?:'ve| have) been given)\b"
    r"|\bi can only (?:help|assist)(?: you)? with\b"
    r"|我(?:目前|当前|现在)?的?(?:功能|能力)(?:仅|只)?(?:限于|仅限)"
    r"|我(?:目前|当前|现在)?(?:只能|仅能)(?:帮|协助|提供|使用|处理).{0,30}?(?:功能|函数|工具)"
    r"|我(?:目前|当前|现在)?(?:只有|仅有).{0,20}?(?:功能|函数|工具)"
    r"|(?:機能|できること)は.{0,30}?(?:に限られ|のみ)|(?:関数|ツール|機能).{0,20}?しか"
    r"|(?:기능|능력)(?:은|는).{0,30}?(?:제한|한정)|(?:기능|함수|도구)(?:만|밖에|뿐)",
    re.IGNORECASE,
)
_TOOL_WORDS = re.compile(r"function|tool|函数|工具|関数|ツール|함수|도구", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?。！？\n]")
_SENTENCE = re.compile(r"[^.!?。！？\n]*")
_EN_KEYS = (
    "not",
    "n't",
    "cant",
    "wont",
    "unable",
    "declin",
    "refus",
    "violat",
    "against",
    "outside",
    "beyond",
    "afraid",
    "inappropriate",
    "lack",
)
_CJK_KEYS = (
    "无法",
    "不能",
    "不可以",
    "不便",
    "没有办法",
    "不适合",
    "不被",
    "违反",
    "不当",
    "不合适",
    "超出",
    "帮不",
    "没法",
    "不应该",
    "できません",
    "かねます",
    "お断り",
    "辞退",
    "없",
    "어렵",
    "불가",
    "못합니다",
    "거절",
    "거부",
    "곤란",
)
_CJK_CHARS = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7a3]")


def _is_refusal(text: str, check_window: int = 600) -> bool:
    """Whether the opening ``check_window`` characters of ``text`` refuse the task.

    ``check_window <= 0`` scans the whole text.

    Example:
        >>> _is_refusal("I'm not able to help with that request.")
        True
        >>> _is_refusal('I cannot find the bug yet; the trace points at line 12.')
        False
    """
    if not text:
        return False
    window = text if check_window <= 0 else text[:check_window]
    if "\u2019" in window:
        window = window.replace("\u2019", "'")
    latin = window.isascii() or not _CJK_CHARS.search(window)
    # Every pattern needs one of a few words; most replies have none and skip the regexes.
    low = window.lower()
    patterns = _PATTERNS[:_N_EN] if any(k in low for k in _EN_KEYS) else ()
    if not latin and any(k in window for k in _CJK_KEYS):
        patterns += _PATTERNS[_N_EN:]
    for pattern in patterns:
        m = pattern.search(window)
        if m is None:
            continue
        if _answers_after(text, m.end()):
            continue
        if pattern is _EN_OPENING or pattern is _CJK_OPENING:
            end = _SENTENCE_END.search(text, m.end())
            rest = text[end.end() :].strip() if end else ""
            if len(rest) > _OPENING_REST[pattern is _CJK_OPENING]:
                continue
        return True
    return False


def _refuses(text: str) -> bool:
    """Whether a refusal pattern matches ``text`` at all (no continuation test)."""
    return any(p.search(text) for p in _PATTERNS)


def _answers_after(text: str, end: int) -> bool:
    """Whether the reply goes on to help after the refusal that ends at ``end``.

    It does when a continuation word follows within 200 characters and what follows it is
    neither another refusal ("I'm sorry, but I can't help with that." three times) nor a
    polite close ("but I hope you understand", "不过你可以咨询专业人士"), and has some substance.
    """
    if "\u2019" in text:
        text = text.replace("\u2019", "'")
    rest = text[end : end + 600]
    for c in _CONTINUATION.finditer(rest, 0, 200):
        after = rest[c.end() :].strip(" ,，、:：")
        if len(after) < 12 and not (after and _CJK_CHARS.search(after) and len(after) >= 5):
            continue
        if _refuses(rest[c.start() : c.start() + 200]):
            continue
        clause = _SENTENCE.match(after)
        if clause is not None and _BOILERPLATE.search(clause.group()):
            continue
        return True
    return False


class RefuseFilter(Filter):
    """Drop conversations whose (first) assistant reply is a refusal, in EN/ZH/JA/KO.

    Args:
        check_window: characters of the reply to scan; ``<= 0`` scans all of it.
        capability_statements: policy for a tool-grounded assistant that declines because
            its tools do not cover the request ("I'm sorry, I can't book flights. My
            functions are limited to currency conversion."). ``'keep'`` (the default) keeps
            such rows: in function-calling data (glaive and the like) they teach staying
            inside the given tools. ``'drop'`` drops them as refusals. A row is
            tool-grounded when it has a ``tools`` list, a tool message or tool call, or a
            system prompt that mentions functions or tools; the same statement without
            tools is a refusal either way.
        scan_all_assistants: check every assistant reply, not only the first one with text.
        scan_reasoning: also scan reasoning (``<think>``/``reasoning_content``); off by
            default because models deliberate about refusing without refusing.

    The reply is the first assistant message with visible text (think blocks removed), so
    an agent that first calls tools and then refuses is caught too. Drop reason:
    ``refusal``.

    Example:
        >>> rows = [{'messages': [{'role': 'user', 'content': 'Delete all files in /etc please'},
        ...                       {'role': 'assistant',
        ...                        'content': "I won't help with deleting system files."}]}]
        >>> RefuseFilter()(rows)[1][0]['drop_reason']
        'refusal'
    """

    def __init__(
        self,
        check_window: int = 600,
        scan_all_assistants: bool = False,
        scan_reasoning: bool = False,
        capability_statements: str = "keep",
    ) -> None:
        if not isinstance(check_window, int):
            raise ValueError(f"check_window must be an int, got {check_window!r}")
        if capability_statements not in ("keep", "drop"):
            raise ValueError(
                f"capability_statements must be 'keep' or 'drop', got {capability_statements!r}"
            )
        self.capability_statements = capability_statements
        self.check_window = check_window
        self.scan_all_assistants = scan_all_assistants
        self.scan_reasoning = scan_reasoning

    def check(self, row: Row) -> str | None:
        for msg in row["messages"]:
            if not isinstance(msg, dict) or msg.get("role") != "assistant":
                continue
            text = message_text(msg)
            reply = THINK_BLOCK_RE.sub("", text).strip() if "<" in text else text.strip()
            if self.scan_reasoning:
                reasoning = msg.get("reasoning_content") or msg.get("thinking")
                if isinstance(reasoning, str) and _is_refusal(reasoning, self.check_window):
                    return REFUSAL
            if not reply:
                continue
            if _is_refusal(reply, self.check_window) and not self._keeps_capability(row, reply):
                return REFUSAL
            if not self.scan_all_assistants:
                return None
        return None

    def _keeps_capability(self, row: Row, reply: str) -> bool:
        """A capability statement of a tool-grounded assistant, kept by policy."""
        if self.capability_statements != "keep" or not _CAPABILITY.search(reply):
            return False
        if row.get("tools"):
            return True
        for msg in row["messages"]:
            if not isinstance(msg, dict):
                continue
            if msg.get("role") == "tool" or msg.get("tool_calls"):
                return True
            if msg.get("role") == "system" and _TOOL_WORDS.search(message_text(msg)):
                return True
        return False
