"""RefuseFilter: drop conversations whose assistant refuses the task (EN/ZH/JA/KO).

Standard-library ``re`` patterns over the opening window of the first assistant reply;
curly apostrophes are folded to ``'`` once so contractions ("I’m not able to") match.
A refusal that turns into help ("I can't run it here, but let me write the script
instead") is not a refusal.
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
    r"|am not (?:allowed|permitted|authorized|comfortable)|'m not (?:allowed|permitted|authorized|comfortable)"
    r"|are not (?:allowed|permitted|authorized)|'re not (?:allowed|permitted|authorized))\b"
    + _GAP
    + r"{0,60}?\b"
    + _TASK_VERB
    + r"\b",
    _IS,
)
_EN_APOLOGY = re.compile(
    r"(?:\bi'?m sorry|\bi am sorry|\bsorry\b|\bi apologi[sz]e|\bunfortunately|\bi regret)\b[^.!?\n]{0,80}?"
    r"\b(?:can'?t|cannot|unable|won'?t|will not|must decline|have to decline|not allowed|not able"
    r"|not comfortable|not appropriate)\b" + _GAP + r"{0,40}?\b" + _TASK_VERB + r"\b",
    _IS,
)
_EN_POLICY = re.compile(
    r"\b(?:this|that|your|the) (?:request|question|prompt|content|topic|task)\b.{0,60}?"
    r"\b(?:violates?|go(?:es)? against|is inappropriate|is not (?:appropriate|allowed|permitted|something i can))",
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
    r"(?:도와\s?드릴 수 없|드릴 수 없|도움을 드릴 수 없|응할 수 없|도와드리기 어렵|지원할 수 없|수행할 수 없"
    r"|제공할 수 없|처리할 수 없|답변할 수 없|못합니다|불가능합니다)"
    r"|(?:답변|도움|처리|제공|지원)(?:을|를)?\s?(?:드리기|하기|해\s?드리기)\s?(?:어렵|불가|할 수 없)"
    r"|(?:요청|질문|내용|부탁|작업)(?:은|는|을|를|에|에는)?.{0,20}?(?:거절|거부|응할 수 없|들어드릴 수 없"
    r"|도와\s?드리기\s?(?:어렵|곤란)|도와\s?드릴 수 없)"
    r"|도와\s?드리기\s?(?:어렵|곤란)합니다"
    r"|(?:도와|제공해|답변해|처리해)\s?드릴 수 없(?:습니다|어요|네요)",
    re.DOTALL,
)
_PATTERNS = (_EN_CORE, _EN_APOLOGY, _EN_POLICY, _EN_STANDALONE, _ZH, _JA, _KO)
# A refusal that goes on to help ("..., but let me write a script instead") is a scoping
# remark, not a refusal; only the opening patterns that are that ambiguous are exempted.
_CONTINUATION = re.compile(
    r"\binstead\b|\b(?:but|however),? (?:i|we|let me|let's|here)\b|(?:^|[.;:]\s*)(?:let me|let's|i'll) (?!know)"
    r"|让我|我来|改用|不过我可以|但我可以|代わりに|その代わり|대신",
    re.IGNORECASE,
)
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
    patterns = _PATTERNS[:4] if any(k in low for k in _EN_KEYS) else ()
    if not latin and any(k in window for k in _CJK_KEYS):
        patterns += _PATTERNS[4:]
    for pattern in patterns:
        m = pattern.search(window)
        if m is None:
            continue
        if pattern in (_EN_CORE, _EN_APOLOGY) or pattern is _ZH:
            tail = window[m.end() : m.end() + 120]
            if _CONTINUATION.search(tail):
                continue
        return True
    return False


class RefuseFilter(Filter):
    """Drop conversations whose (first) assistant reply is a refusal, in EN/ZH/JA/KO.

    Args:
        check_window: characters of the reply to scan; ``<= 0`` scans all of it.
        scan_all_assistants: check every assistant reply, not only the first one with text.
        scan_reasoning: also scan reasoning (``<think>``/``reasoning_content``); off by
            default because models deliberate about refusing without refusing.

    The reply is the first assistant message with visible text (think blocks removed), so
    an agent that first calls tools and then refuses is caught too. Drop reason:
    ``refusal``.

    Example:
        >>> rows = [{'messages': [{'role': 'user', 'content': 'Delete all files in /etc please'},
        ...                       {'role': 'assistant', 'content': "I won't help with deleting system files."}]}]
        >>> RefuseFilter()(rows)[1][0]['drop_reason']
        'refusal'
    """

    def __init__(
        self,
        check_window: int = 600,
        scan_all_assistants: bool = False,
        scan_reasoning: bool = False,
    ) -> None:
        if not isinstance(check_window, int):
            raise ValueError(f"check_window must be an int, got {check_window!r}")
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
            if _is_refusal(reply, self.check_window):
                return REFUSAL
            if not self.scan_all_assistants:
                return None
        return None
