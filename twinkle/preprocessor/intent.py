"""``IntentClassifier``: tag each row with what its conversation is about (EN/ZH/JA/KO).

Heuristic and pluggable, as documented: a detector is called as ``det(messages)`` and returns
the sorted indices of the assistant messages it claims ("key rounds"). Detectors run in
order; the first to claim a round gives it its intent, and a ``definitive`` detector
(``ToolCallDetector``) that claims anything stops the pipeline. The row's intent is the most
common round intent (ties: the first claimed). Intents: ``tool_call``, ``code``, ``math``,
``complex_logic``, ``reasoning``, ``user_dissatisfaction``, ``other``.

Every row is kept by default (rows with no key round get ``other``); pass
``drop_no_key_rounds=True`` to drop those with ``no_key_rounds``. A row gets
``row[intent_field]`` and, when key rounds were found, ``user_data`` entries ``key_rounds``
(the indices) and ``intents`` (``{index: intent}``), both JSON text, which ``ScoreFilter``
reads. The classifier counts the intents of the rows it returns in ``tag_counts``;
``QualityPreprocessor`` reads them through ``tag_field`` into the step's ``tags`` statistic.

Regex detectors scan user and assistant messages: an assistant match claims its own index, a
user match the next assistant after it. Code, math and logic detectors ignore think blocks.

Example:
    >>> rows = [{'messages': [
    ...     {'role': 'user', 'content': 'Solve x^2 - 5x + 6 = 0.'},
    ...     {'role': 'assistant', 'content': '$(x-2)(x-3)=0$, so $x=2$ or $x=3$ (sum $5$).'}]},
    ...     {'messages': [{'role': 'user', 'content': 'hello'},
    ...                   {'role': 'assistant', 'content': 'Hi!'}]}]
    >>> kept, dropped = IntentClassifier()(rows)
    >>> [r['intent'] for r in kept], dropped
    (['math', 'other'], [])
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from twinkle.data_format import (
    CJK_CHARS_RE,
    message_text,
    normalize_tool_calls,
    pack_value,
    split_think,
)
from twinkle.preprocessor.base import Row, drop, logger, map_col_to_row

INTENTS = (
    "tool_call",
    "code",
    "math",
    "complex_logic",
    "reasoning",
    "user_dissatisfaction",
    "other",
)
NO_KEY_ROUNDS = "no_key_rounds"


def _texts(messages: Sequence[Any], strip_think: bool) -> list[tuple[int, str, str]]:
    """``(index, role, text)`` of the user and assistant messages."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            continue
        text = message_text(m)
        if strip_think and m["role"] == "assistant" and "<" in text:
            text = split_think(text)[0]
        out.append((i, m["role"], text))
    return out


def _pair(messages: Sequence[Any], hits: list[int]) -> list[int]:
    """Assistant indices for matched messages: an assistant keys itself, a user the next one."""
    keys = set()
    for i in hits:
        role = messages[i].get("role")
        if role == "assistant":
            keys.add(i)
            continue
        for j in range(i + 1, len(messages)):
            m = messages[j]
            if isinstance(m, dict) and m.get("role") == "assistant":
                keys.add(j)
                break
    return sorted(keys)


class Detector:
    """Base of the detectors: ``intent``, ``definitive`` and ``__call__(messages)``."""

    intent = "other"
    definitive = False

    def __call__(self, messages: Sequence[Any]) -> list[int]:
        raise NotImplementedError


class RegexDetector(Detector):
    """Claims rounds whose text has at least ``threshold`` ``findall`` hits of ``pattern``.

    ``strong`` (optional) is a pattern one hit of which is enough, such as a user asking for
    a program; ``roles`` limits the scanned messages.
    """

    pattern: re.Pattern[str]
    strong: re.Pattern[str] | None = None
    roles: tuple[str, ...] = ("user", "assistant")
    strip_think = True

    def __init__(self, threshold: int = 1) -> None:
        self.threshold = threshold

    #: Count the hits of a user turn and the reply to it together (short Q&A rounds).
    per_round = False

    def count(self, text: str, cap: int) -> int:
        n = 0
        for _ in self.pattern.finditer(text):
            n += 1
            if n >= cap:
                break
        return n

    def hit(self, role: str, text: str) -> bool:
        if self.strong is not None and self.strong.search(text):
            return True
        if self.threshold <= 1:
            return self.pattern.search(text) is not None
        return self.count(text, self.threshold) >= self.threshold

    def __call__(self, messages: Sequence[Any]) -> list[int]:
        texts = [t for t in _texts(messages, self.strip_think) if t[1] in self.roles and t[2]]
        hits = [i for i, role, text in texts if self.hit(role, text)]
        if self.per_round:
            carried = 0  # hits of the user turns since the last assistant
            for i, role, text in texts:
                n = self.count(text, self.threshold)
                if role == "user":
                    carried += n
                else:
                    if carried + n >= self.threshold:
                        hits.append(i)
                    carried = 0
        return _pair(messages, sorted(set(hits)))


class ToolCallDetector(Detector):
    """Every assistant that makes a tool call (OpenAI ``tool_calls`` in any accepted form)."""

    intent = "tool_call"
    definitive = True

    def __call__(self, messages: Sequence[Any]) -> list[int]:
        return [
            i
            for i, m in enumerate(messages)
            if isinstance(m, dict)
            and m.get("role") == "assistant"
            and normalize_tool_calls(m) is not None
        ]


_FENCE_RE = re.compile(r"```[^\n`]*\n?(.{10,}?)```", re.DOTALL)
_CODE_WORDS = (
    r"\b(?:def |class |import |from \w+ import |function |const |let |var |return |if \(|"
    r"for \(|while \(|#include|public class|private |protected |async |await |yield |"
    r"throw |throws |catch |switch |case |void |struct |enum |interface |abstract |"
    r"static |final |namespace |package |module |export |lambda |func |fn |println|"
    r"console\.log)\b"
    r"|\w\([^()\n]*\)\s*\{|=>\s*\{|->\s*[A-Z]\w*"
)
# A request for code in any of the four languages: one is enough for the next reply.
_CODE_REQUEST = (
    r"(?i:\b(?:write|implement|fix|debug|refactor)\b.{0,40}\b(?:function|script|program|"
    r"class|code|regex|query|sql|method|bug)\b)"
    r"|(?:写|实现|编写|修复|调试|优化).{0,12}(?:函数|代码|程序|脚本|正则|类|接口|SQL|bug)"
    r"|(?:関数|コード|プログラム|スクリプト|正規表現|クラス|SQL).{0,8}(?:を)?"
    r"(?:書いて|作って|実装|修正|直して|デバッグ)"
    r"|(?:함수|코드|프로그램|스크립트|정규식|클래스|SQL).{0,8}(?:를|을)?\s?"
    r"(?:작성|짜|구현|수정|고쳐|디버그)"
    # An error message or a stack trace pasted in: the round is about code.
    r"|\b[A-Z]\w*(?:Error|Exception)\b: |Traceback \(most recent call last\)"
    r"|\bSegmentation fault\b|\bcommand not found\b"
)


class CodeDetector(RegexDetector):
    """A fenced code block (10+ characters), ``threshold`` code keywords, or a code request."""

    intent = "code"
    pattern = re.compile(_CODE_WORDS)
    strong = re.compile(_CODE_REQUEST)

    def __init__(self, threshold: int = 3) -> None:
        super().__init__(threshold)

    def hit(self, role: str, text: str) -> bool:
        if "```" in text and _FENCE_RE.search(text):
            return True
        return super().hit(role, text)


_MATH = (
    r"\$\$.+?\$\$|\$[^$\n]+\$|\\\[.+?\\\]"
    r"|\\(?:frac|sum|int|lim|sqrt|overline|boxed|mathrm|mathbb|partial|nabla|langle|rangle|"
    r"cdot|times|div|pm|leq|geq|neq|approx|equiv|infty|pi|alpha|beta|gamma|theta|lambda|mu|"
    r"sigma|prod|to|rightarrow)\b|\\begin\{(?:equation|align|matrix)\}|\\text\{"
    r"|[×÷±°∑∏∫√∂∇∞∈∋⊂⊃⊆⊇≤≥≠≈≡≅∝⇒⇔α-ωΔΘΛΞΠΣΦΨΩ⁰¹²³⁴⁵⁶⁷⁸⁹₀₁₂₃₄₅₆₇₈₉½⅓⅔¼¾⅛⅜⅝⅞]"
    r"|\b\d+(?:\.\d+)?\s*[×÷*/+\-]\s*\d+(?:\.\d+)?\s*=\s*-?\d"
    r"|\b\d*[a-z][²³]?\s*[+\-*/]\s*\d+\s*=\s*-?\d"
    r"|\b\d+,\s*\d+,\s*\d+,\s*\d+\b|\b[a-zA-Z]\s*=\s*-?\d|\w_\{[^}]*\}|\w\^\{[^}]*\}|\b\w\^\d"
    # Chinese
    r"|积分|微分|导数|求导|偏导|梯度|极限|矩阵|向量|行列式|特征值|特征向量|多项式|因式分解|不等式"
    r"|方程组?|求解|解方程|未知数|化简|约分|通分|代入|应用题|算式|计算题"
    r"|一元(?:一次|二次|三次|方程|不等式|多项式)|二元(?:一次|二次|方程)?"
    r"|平方根?|立方根?|开方|根号|对数|指数函数|三角函数|正弦|余弦|正切|余切"
    r"|概率|期望值?|方差|标准差|随机变量|均值|中位数|众数|百分比"
    r"|子集|并集|交集|空集|乘以|除以|系数|公差|公比|渐近线|对称轴|双曲线|抛物线|椭圆"
    r"|三角形|四边形|多边形|长方形|正方形|圆锥|圆柱|球体|平行四边形|梯形|菱形"
    r"|半径|直径|周长|面积|体积|对角线|勾股|弧度|象限|坐标系"
    r"|等差数列|等比数列|通项|递推公式|[奇偶]数|质数|素数|合数|整数|有理数|无理数|实数"
    r"|因数|倍数|最大公约数|最小公倍数|阶乘|排列组合|余数|被除数|除数"
    # Japanese
    r"|方程式|積分|確率|平方根|三角関数|微分方程式|連立|因数分解|二次関数|証明せよ|証明|"
    r"面積|体積|円周|半径|直径|素数|分数|小数|平均値|分散|標準偏差|期待値|計算して|求めよ|求めなさい"
    # Korean
    r"|방정식|미분|적분|확률|제곱근|삼각형|넓이|부피|둘레|반지름|지름|분수|평균|분산"
    r"|표준편차|기댓값|인수분해|증명|계산해|구하시오|구하세요|곱하기|나누기|더하기|빼기"
    # English
    r"|\b(?:integral|differential|derivative|gradient|polynomial|equation|inequality|matrix|"
    r"vector|determinant|eigenvalue|eigenvector|coefficient|logarithm|exponential|sqrt|"
    r"theorem|lemma|proof|axiom|corollary|sine|cosine|tangent|arcsin|arccos|arctan|"
    r"probability|variance|expectation|median|subset|superset|intersection|"
    r"multiply|divide|squared|cubed|factorial|radius|diameter|circumference|perimeter|"
    r"hypotenuse|congruent|perpendicular|integer|fraction|solve|calculate|quotient|"
    r"remainder)\b"
)


class MathDetector(RegexDetector):
    """At least ``threshold`` hits of LaTeX, math symbols, formulas or math vocabulary.

    Counted per message and per round (a user turn plus the reply), so a short problem with
    a short worked answer counts.
    """

    intent = "math"
    pattern = re.compile(_MATH, re.DOTALL)
    per_round = True

    def __init__(self, threshold: int = 4) -> None:
        super().__init__(threshold)


_LOGIC = (
    r"首先.{4,}?其次|其次.{4,}?最后|第一.{4,}?第二.{4,}?第三|一方面.{4,}?另一方面|从.{1,6}角度"
    r"|如果.{2,30}?那么|假设.{2,30}?则|若.{2,20}?则|分情况讨论|分[为成].{0,5}[种类个].{0,10}?"
    r"(?:情况|情形|场景|类型)|因为.{2,40}?所以|由于.{2,40}?因此|既然.{2,30}?那么"
    r"|之所以.{2,30}?是因为|综上(?:所述)?|综合(?:以上|来看|分析)|总而言之|由此可[得见知]"
    r"|优缺点|利弊|优劣|权衡|对比分析|相比之下|需要同时满足|同时考虑|兼顾|约束条件"
    # Japanese
    r"|まず.{4,}?次に|第一に|第二に|第三に|一方で|他方で|したがって|そのため|結論として|まとめると"
    r"|もし.{2,30}?(?:ならば|なら|場合)|メリットとデメリット|長所と短所|トレードオフ|比較すると"
    r"|さらに|最後に|以上のことから"
    # Korean
    r"|먼저.{4,}?다음으로|첫째|둘째|셋째|마지막으로|한편|반면에?|따라서|그러므로|결론적으로"
    r"|요약하면|만약.{2,30}?(?:라면|다면|면)|장단점|트레이드오프|고려하면|게다가"
    # English
    r"|\b(?:first(?:ly)?|second(?:ly)?|third(?:ly)?|finally|furthermore|moreover|in addition|"
    r"on (?:the )?one hand|on the other hand|as a result|consequently|therefore|hence|thus|"
    r"accordingly|in conclusion|in summary|to summari[sz]e|to conclude|overall|"
    r"all things considered|pros and cons|trade-?offs?|case \d|scenario \d)\b"
    r"|\bif\b.{5,30}?\bthen\b|\bassuming\b.{5,30}?\bthen\b"
    r"|\bweighing\b.{3,20}?\bagainst\b|\badvantages\b.{0,10}?\bdisadvantages\b"
)


class ComplexLogicDetector(RegexDetector):
    """Assistant replies with ``threshold`` markers of structured argument (steps, cases…)."""

    intent = "complex_logic"
    pattern = re.compile(_LOGIC, re.DOTALL | re.IGNORECASE)
    roles = ("assistant",)

    def __init__(self, threshold: int = 6) -> None:
        super().__init__(threshold)


def _width(text: str) -> int:
    """Length with CJK characters counted twice (one carries about two Latin letters' worth)."""
    return len(text) + len(CJK_CHARS_RE.findall(text))


class ReasoningDetector(Detector):
    """Assistants with ``reasoning_content`` (else a think block) of at least ``min_chars``.

    CJK characters count double, so a Chinese chain of thought qualifies at ~100 characters.
    """

    intent = "reasoning"

    def __init__(self, min_chars: int = 200) -> None:
        self.min_chars = min_chars

    def __call__(self, messages: Sequence[Any]) -> list[int]:
        out = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") != "assistant":
                continue
            reasoning = m.get("reasoning_content") or m.get("thinking")
            if not (isinstance(reasoning, str) and reasoning.strip()):
                reasoning = split_think(message_text(m))[1]
            if _width(reasoning.strip()) >= self.min_chars:
                out.append(i)
        return out


_DISSATISFIED = (
    # English
    r"(?i:\b(?:that'?s|that is|this is|it'?s|your (?:answer|code|reply|response) is|you'?re|"
    r"you are)\s+(?:still\s+|just\s+|completely\s+|totally\s+)?(?:wrong|incorrect|not right|"
    r"not correct|useless|not helpful|nonsense|not what i)"
    r"|\bnot what i (?:asked|wanted|meant|need)|\b(?:does ?n[o']t|did ?n[o']t|still does ?n[o']t)"
    r" (?:work|make sense|help|answer)|\bmakes no sense\b|\btry again\b|\bredo\b|\bstart over\b"
    r"|\bdo better\b|\bwaste of (?:my )?time\b|\byou (?:misunderstood|misread|ignored)"
    r"|\byou (?:did ?n[o']t|do ?n[o']t) (?:understand|listen|read|answer)|\bmissed the point"
    r"|\b(?:useless|nonsense|garbage|rubbish|bullshit)\b|\bwtf\b|\bwhat the (?:hell|heck)\b"
    r"|\bcome on\b|\bare you (?:serious|kidding|joking)\b|\bfrustrat\w+|\bi (?:already|just) "
    r"(?:told|said|asked)|\bstill (?:wrong|broken|not working|fails|failing)\b|\bwrong again\b"
    r"|\boff[- ]topic\b|\bway off\b|\bnot even close\b)"
    # Chinese
    r"|不对|不是这样|错了|你错|答错|说错|重新(?:回答|来|写|做|说)|再试|没用|跑题|答非所问|离谱|胡说"
    r"|废话|失望|理解错|我问的不是|我说的是|浪费时间|垃圾|什么玩意|还是不行|还是错|不行啊|没回答"
    r"|不满意|太差|根本不|并没有回答"
    # Japanese
    r"|違います|違う(?:よ|って|でしょ|じゃ)|間違って|間違い(?:です|だ)|そうじゃな|そうではな"
    r"|役に立たな|やり直し|もう一度(?:答え|やり|考え)|意味が(?:わから|分から)な|全然(?:違|だめ|ダメ)"
    r"|ひどい|がっかり|聞いてな|質問に答えて|求めているのは|ちゃんと(?:答え|読ん)"
    # Korean
    r"|틀렸|틀린\s?(?:답|거)|아니잖아|그게 아니라|그게 아니고|다시 (?:해|답|작성|설명)|엉터리"
    r"|쓸모없|도움이 안|이해를 못|질문에 답|말이 안 (?:돼|되)|실망|짜증|제대로 (?:좀|답|해)"
    r"|(?:이건|이거|그건|답이|답변이) 별로|마음에 안 들"
)


class UserDissatisfactionDetector(Detector):
    """A user turn after an assistant that says the reply was wrong, useless or off the mark."""

    intent = "user_dissatisfaction"
    pattern = re.compile(_DISSATISFIED)

    def __call__(self, messages: Sequence[Any]) -> list[int]:
        seen_assistant = False
        hits = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                continue
            role = m.get("role")
            if role == "assistant":
                seen_assistant = True
            elif role == "user" and seen_assistant and self.pattern.search(message_text(m)):
                hits.append(i)
        return _pair(messages, hits)


Detectors = Sequence[Callable[[Sequence[Any]], list[int]]]


def default_detectors() -> list[Detector]:
    """The six detectors in documented order (fresh instances)."""
    return [
        ToolCallDetector(),
        CodeDetector(threshold=3),
        MathDetector(threshold=4),
        ComplexLogicDetector(threshold=6),
        ReasoningDetector(min_chars=200),
        UserDissatisfactionDetector(),
    ]


def _user_data(existing: Any, rounds: list[int], intents: dict[int, str]) -> Any:
    entries = {"key_rounds": pack_value(rounds), "intents": pack_value(intents)}
    if isinstance(existing, dict):
        return {**existing, **entries}
    kept = [
        p
        for p in (existing if isinstance(existing, list) else [])
        if not (isinstance(p, (list, tuple)) and p and p[0] in entries)
    ]
    return kept + [[k, v] for k, v in entries.items()]


class IntentClassifier:
    """Tag rows with their intent (see the module doc); keeps every row unless asked not to.

    Args:
        detectors: callables ``messages -> [assistant indices]`` with an ``intent``
            attribute (and optional ``definitive``); default ``default_detectors()``.
        intent_field: the row field that receives the intent.
        drop_no_key_rounds: drop rows no detector claims (``no_key_rounds``) instead of
            tagging them ``other``.

    ``tag_counts`` counts the intents of every row returned so far; ``tag_field`` names the
    field for ``QualityPreprocessor``'s per-step ``tags`` statistic.
    """

    DEFAULT_DETECTORS: tuple[str, ...] = tuple(type(d).__name__ for d in default_detectors())

    def __init__(
        self,
        detectors: Detectors | None = None,
        intent_field: str = "intent",
        drop_no_key_rounds: bool = False,
    ) -> None:
        self.detectors = list(default_detectors() if detectors is None else detectors)
        for det in self.detectors:
            if not callable(det) or not isinstance(getattr(det, "intent", None), str):
                raise TypeError(f"detector {det!r} must be callable with a str 'intent' attribute")
        self.intent_field = intent_field
        self.drop_no_key_rounds = drop_no_key_rounds
        self.tag_counts: Counter = Counter()

    @property
    def __name__(self) -> str:
        return "IntentClassifier"

    @property
    def tag_field(self) -> str:
        return self.intent_field

    @property
    def adds_columns(self) -> tuple[str, ...]:
        return (self.intent_field,)

    def classify(self, messages: Any) -> tuple[str, dict[int, str]]:
        """``(primary intent, {assistant index: intent})`` of one message list."""
        if not isinstance(messages, list) or not messages:
            return "other", {}
        rounds: dict[int, str] = {}
        for det in self.detectors:
            found = det(messages)
            for idx in found:
                rounds.setdefault(idx, det.intent)
            if found and getattr(det, "definitive", False):
                break
        if not rounds:
            return "other", {}
        return Counter(rounds.values()).most_common(1)[0][0], rounds

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        kept: list[Row] = []
        dropped: list[Row] = []
        for row in map_col_to_row(rows):
            if not isinstance(row, dict):
                kept.append(row)  # nothing to tag; later steps judge it
                continue
            try:
                primary, rounds = self.classify(row.get("messages"))
            except Exception as exc:  # noqa: BLE001 - a tagger never loses a row to a bug
                logger.debug("IntentClassifier failed on a row: %r", exc)
                primary, rounds = "other", {}
            if not rounds and self.drop_no_key_rounds:
                dropped.append(drop(row, NO_KEY_ROUNDS))
                continue
            out = {**row, self.intent_field: primary}
            if rounds:
                ordered = sorted(rounds)
                out["user_data"] = _user_data(
                    row.get("user_data"), ordered, {i: rounds[i] for i in ordered}
                )
            kept.append(out)
        counts = Counter(r.get(self.intent_field) for r in kept if isinstance(r, dict))
        self.tag_counts.update(counts)
        logger.info("[IntentClassifier] %s", dict(counts))
        return kept, dropped
