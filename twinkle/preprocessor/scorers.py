"""Scorers of ``ScoreFilter``: what each one really computes.

None of them executes code or measures character-level or embedding similarity; all are
model-based:

- ``ChrMinScorer`` (``chr_min``, needs logprobs): for each assistant token, ``delta`` = its
  logprob given the conversation minus its logprob given the reply alone. Grouped by token
  id (each id's *minimum* delta), the score is the fraction of distinct ids whose minimum
  delta is > 0, i.e. how much of the reply's vocabulary the context makes more likely. A
  round passes when ``low <= score < threshold`` (``low`` defaults to None: only the upper
  bound of the seed's implementation; set it for the two-sided ``[low, high)`` form).
- ``SIFDScorer`` (``sifd``, needs logprobs): instruction-following difficulty,
  ``ifd = exp(-mean delta)`` (perplexity of the reply with the context over without it),
  plus ``s_ifd_50``/``s_ifd_75`` over the 50%/75% of tokens with the largest ``|delta|``.
  Passes when ``min_ifd <= ifd`` and ``ifd <= max_ifd`` for the bounds set; with none set it
  only annotates.
- ``PassNScorer`` (``pass_n``): ``n`` self-rollouts from the context, each judged PASS/FAIL
  against the original reply by an LLM judge; score = passes / n; passes when at least
  ``min_pass`` rollouts pass (0 by default: annotate only).
- ``ParaphraseScorer`` (``paraphrase``): the model paraphrases the original reply (given
  as a reference), and the paraphrase is scored with ChrMin against the original context.
  Its logprob batches are padded to the backend's data-parallel floor like ScoreFilter's.

Example:
    >>> chr_min_distinct([None, -1.0, -0.5, -2.0], [None, -2.0, -1.0], [5, 6, 7, 8], [6, 7, 8], 1)
    0.5
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from twinkle.data_format import SamplingParams
from twinkle.preprocessor.llm_backend import LLMBackend, logger, pad_batch

_MIN_RESPONSE_TOKENS = 5


@dataclass
class RoundContext:
    """One scored assistant turn: the row, the prompt ids and the reply ids."""

    row_idx: int
    rnd_idx: int
    asst_idx: int
    row: dict[str, Any]
    intent: str | None
    messages: list[dict[str, Any]]
    context_messages: list[dict[str, Any]]
    cond_ids: list[int]
    n_prompt: int
    asst_ids: list[int]
    asst_text: str
    user_prompt: str
    features: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScoreResult:
    score: float | None = None
    passed: bool = True
    extras: dict[str, Any] = field(default_factory=dict)


class Scorer(Protocol):
    name: str
    requires_logprobs: bool

    def score(self, contexts: Sequence[RoundContext]) -> list[ScoreResult]: ...


def _deltas(
    cond_lp: Sequence[float | None],
    asst_lp: Sequence[float | None],
    cond_ids: Sequence[int],
    asst_ids: Sequence[int],
    n_prompt: int,
    exclude_ids: set[int] | None = None,
) -> list[tuple[int, float]]:
    """``(token id, cond - asst logprob)`` per assistant token (position ``n_prompt + i``)."""
    out = []
    for i, token in enumerate(asst_ids):
        pos = n_prompt + i
        if pos >= len(cond_lp) or i >= len(asst_lp):
            break
        if token is None or (exclude_ids and token in exclude_ids):
            continue
        c, a = cond_lp[pos], asst_lp[i]
        if c is None or a is None:
            continue
        if pos < len(cond_ids) and cond_ids[pos] != token:
            continue  # misaligned (tokenizer boundary): skip rather than compare wrong tokens
        out.append((token, float(c) - float(a)))
    return out


def chr_min_distinct(
    cond_lp: Sequence[float | None] | None,
    asst_lp: Sequence[float | None] | None,
    cond_ids: Sequence[int],
    asst_ids: Sequence[int],
    n_prompt: int,
    exclude_ids: set[int] | None = None,
) -> float | None:
    """Fraction of distinct reply token ids whose minimum delta is > 0 (None if none)."""
    if not cond_lp or not asst_lp or not asst_ids:
        return None
    minimum: dict[int, float] = {}
    for token, delta in _deltas(cond_lp, asst_lp, cond_ids, asst_ids, n_prompt, exclude_ids):
        minimum[token] = min(delta, minimum.get(token, delta))
    if not minimum:
        return None
    return sum(1 for d in minimum.values() if d > 0) / len(minimum)


def ifd_family_metrics(
    cond_lp: Sequence[float | None] | None,
    asst_lp: Sequence[float | None] | None,
    cond_ids: Sequence[int],
    asst_ids: Sequence[int],
    n_prompt: int,
) -> dict[str, float]:
    """``{n_tokens, mean_delta, ifd, s_ifd_50, s_ifd_75}`` ({} without aligned tokens)."""
    if not cond_lp or not asst_lp:
        return {}
    deltas = [d for _, d in _deltas(cond_lp, asst_lp, cond_ids, asst_ids, n_prompt)]
    if not deltas:
        return {}
    mean = sum(deltas) / len(deltas)
    out = {"n_tokens": float(len(deltas)), "mean_delta": mean, "ifd": math.exp(-mean)}
    ranked = sorted(deltas, key=abs, reverse=True)
    for k in (50, 75):
        top = ranked[: max(1, round(len(deltas) * k / 100))]
        out[f"s_ifd_{k}"] = math.exp(-sum(top) / len(top))
    return out


class ChrMinScorer:
    """ChrMin with an upper ``threshold`` and an optional lower bound ``low`` (see module)."""

    name = "chr_min"
    requires_logprobs = True

    def __init__(self, threshold: float | None = 0.47, low: float | None = None) -> None:
        self.threshold = threshold
        self.low = low

    def score(self, contexts: Sequence[RoundContext]) -> list[ScoreResult]:
        out = []
        for ctx in contexts:
            s = chr_min_distinct(
                ctx.features.get("cond_lp"),
                ctx.features.get("asst_lp"),
                ctx.cond_ids,
                ctx.asst_ids,
                ctx.n_prompt,
            )
            out.append(
                ScoreResult(s, self.passes(s), {"threshold": self.threshold, "low": self.low})
            )
        return out

    def passes(self, s: float | None) -> bool:
        if s is None:
            return True
        if self.threshold is not None and s >= self.threshold:
            return False
        return self.low is None or s >= self.low


class SIFDScorer:
    """IFD and its selective variants; drops only outside ``[ifd_threshold, max_ifd]``."""

    name = "sifd"
    requires_logprobs = True

    def __init__(self, ifd_threshold: float | None = None, max_ifd: float | None = None) -> None:
        self.ifd_threshold = ifd_threshold
        self.max_ifd = max_ifd

    def score(self, contexts: Sequence[RoundContext]) -> list[ScoreResult]:
        out = []
        for ctx in contexts:
            m = ifd_family_metrics(
                ctx.features.get("cond_lp"),
                ctx.features.get("asst_lp"),
                ctx.cond_ids,
                ctx.asst_ids,
                ctx.n_prompt,
            )
            ifd = m.get("ifd")
            passed = ifd is None or (
                (self.ifd_threshold is None or ifd >= self.ifd_threshold)
                and (self.max_ifd is None or ifd <= self.max_ifd)
            )
            out.append(ScoreResult(ifd, passed, dict(m)))
        return out


JUDGE_SYSTEM = (
    "You are a strict grader. Compare the model's answer with the reference answer to the "
    "question. The answer passes if it reaches the same result and is correct, even if worded "
    "differently. End with exactly one of <verdict>PASS</verdict> or <verdict>FAIL</verdict>."
)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return text[:head] + "\n\n...[truncated]...\n\n" + text[-(limit - head) :]


def parse_verdict(text: str) -> bool | None:
    """PASS/FAIL from a judge's reply (tags first, then a bare word at the end), or None."""
    flat = re.sub(r"\s+", "", (text or "").upper())
    has_pass, has_fail = "<VERDICT>PASS</VERDICT>" in flat, "<VERDICT>FAIL</VERDICT>" in flat
    if has_pass != has_fail:
        return has_pass
    tail = flat[-200:]
    if ("PASS" in tail) != ("FAIL" in tail):
        return "PASS" in tail
    return None


class PassNScorer:
    """``n`` self-rollouts judged against the original reply (see module).

    ``judge_api`` is any ``twinkle.protocol`` API (called as ``api(trajectory,
    SamplingParams, extra_body=...)``); or give ``judge_model`` (+ ``judge_base_url``,
    ``judge_api_key``) to build ``twinkle.protocol.openai.OpenAI``. Without a judge every
    verdict is PASS, with a warning.
    """

    name = "pass_n"
    requires_logprobs = False

    def __init__(
        self,
        backend: LLMBackend,
        judge_api: Any = None,
        judge_model: str | None = None,
        judge_base_url: str | None = None,
        judge_api_key: str | None = None,
        judge_client_kwargs: dict[str, Any] | None = None,
        n: int = 4,
        min_pass: int = 0,
        sample_temperature: float = 0.7,
        sample_max_tokens: int = 4096,
        judge_temperature: float = 0.0,
        judge_max_tokens: int = 512,
        judge_max_rollout_chars: int = 8000,
        judge_max_workers: int = 8,
    ) -> None:
        if backend is None:
            raise TypeError("PassNScorer needs backend= (an OpenAIBackend or SamplerBackend)")
        self.backend = backend
        if judge_api is None and judge_model:
            from twinkle.protocol.openai import OpenAI

            judge_api = OpenAI(
                model=judge_model,
                base_url=judge_base_url,
                api_key=judge_api_key,
                client_kwargs=judge_client_kwargs,
            )
        if judge_api is None:
            logger.warning("PassNScorer has no judge: every rollout counts as PASS")
        self.judge_api = judge_api
        self.n, self.min_pass = n, min_pass
        self.sample_temperature, self.sample_max_tokens = sample_temperature, sample_max_tokens
        self.judge_temperature, self.judge_max_tokens = judge_temperature, judge_max_tokens
        self.judge_max_rollout_chars = judge_max_rollout_chars
        self.judge_max_workers = judge_max_workers

    def _judge(self, question: str, reference: str, answer: str) -> tuple[bool, str]:
        if not answer.strip():
            return False, ""
        if self.judge_api is None:
            return True, ""
        limit = self.judge_max_rollout_chars
        user = (
            f"[问题]\n{_clip(question, limit)}\n\n[参考答案]\n{_clip(reference, limit)}\n\n"
            f"[模型回答]\n{_clip(answer, limit)}\n\n请评分。"
        )
        traj = {
            "messages": [
                {"role": "system", "content": JUDGE_SYSTEM},
                {"role": "user", "content": user},
            ]
        }
        params = SamplingParams(
            temperature=self.judge_temperature, max_tokens=self.judge_max_tokens
        )
        try:
            reply = self.judge_api(traj, params, extra_body={"enable_thinking": False})
        except Exception as exc:  # noqa: BLE001 - a failed judgement counts as FAIL
            logger.warning("PassN judge failed: %r", exc)
            return False, repr(exc)
        raw = (reply or {}).get("content") or "" if isinstance(reply, dict) else str(reply)
        return bool(parse_verdict(raw)), raw

    def score(self, contexts: Sequence[RoundContext]) -> list[ScoreResult]:
        if not contexts:
            return []
        rollouts = self.backend.chat_batch(
            [c.context_messages for c in contexts],
            temperature=self.sample_temperature,
            max_tokens=self.sample_max_tokens,
            n=self.n,
        )
        jobs = []
        for ci, (ctx, replies) in enumerate(zip(contexts, rollouts)):
            for ri, r in enumerate(replies):
                text = r.get("content", "")
                if r.get("reasoning_content"):
                    text = f"<thinking>\n{r['reasoning_content']}\n</thinking>\n\n{text}"
                jobs.append((ci, ri, ctx.user_prompt, ctx.asst_text, text))
        with ThreadPoolExecutor(max_workers=self.judge_max_workers) as pool:
            verdicts = list(pool.map(lambda j: self._judge(j[2], j[3], j[4]), jobs))
        out = []
        for ci, replies in enumerate(rollouts):
            mine = [(j, v) for j, v in zip(jobs, verdicts) if j[0] == ci]
            passes = sum(1 for _, (ok, _) in mine if ok)
            extras = {
                "pass_count": passes,
                "n_rollouts": len(replies),
                "rollouts": [{"rollout_idx": j[1], "content": j[4]} for j, _ in mine],
                "judgments": [
                    {"rollout_idx": j[1], "passed": ok, "judge_raw": raw} for j, (ok, raw) in mine
                ],
                "min_pass": self.min_pass,
            }
            score = passes / len(replies) if replies else None
            out.append(ScoreResult(score, passes >= self.min_pass, extras))
        return out


PARAPHRASE_INSTRUCTION = (
    "\n\nHere is a reference answer. Rewrite it in your own words, keeping every fact, step and "
    "result, and answer with the rewritten answer only.\n<reference_answer>\n{ref}\n"
    "</reference_answer>"
)


class ParaphraseScorer:
    """The model's paraphrase of the reply, scored by ChrMin against the original context."""

    name = "paraphrase"
    requires_logprobs = False

    def __init__(
        self,
        backend: LLMBackend,
        template: Any,
        chr_min_threshold: float | None = None,
        prompt_budget: int = 4096,
        sample_temperature: float = 0.7,
        sample_max_tokens: int = 4096,
        max_prompt_tokens: int = 1024,
    ) -> None:
        if backend is None or template is None:
            raise TypeError("ParaphraseScorer needs backend= and template= (a ChatTemplate)")
        self.backend, self.template = backend, template
        self.chr_min = ChrMinScorer(threshold=chr_min_threshold)
        self.prompt_budget, self.max_prompt_tokens = prompt_budget, max_prompt_tokens
        self.sample_temperature, self.sample_max_tokens = sample_temperature, sample_max_tokens

    def _tokens(self, text: str) -> list[int]:
        return list(self.template.tokenizer(text, add_special_tokens=False)["input_ids"])

    def score(self, contexts: Sequence[RoundContext]) -> list[ScoreResult]:
        results: list[ScoreResult | None] = [None] * len(contexts)
        asks, todo = [], []
        for i, ctx in enumerate(contexts):
            budget = self.prompt_budget - ctx.n_prompt - 80
            if budget < 50:
                results[i] = ScoreResult(None, True, {"reason": "paraphrase skipped"})
                continue
            ref = self.template.decode(self._tokens(ctx.asst_text)[:budget])
            msgs = [dict(m) for m in ctx.context_messages]
            note = PARAPHRASE_INSTRUCTION.format(ref=ref)
            if msgs and msgs[-1].get("role") == "user" and isinstance(msgs[-1].get("content"), str):
                msgs[-1]["content"] += note
            else:
                msgs.append({"role": "user", "content": note.strip()})
            asks.append(msgs)
            todo.append(i)
        replies = self.backend.chat_batch(
            asks, temperature=self.sample_temperature, max_tokens=self.sample_max_tokens, n=1
        )
        cond, asst, keep = [], [], []
        for i, reply in zip(todo, replies):
            ctx = contexts[i]
            text = reply[0]["content"] if reply else ""
            ids = self._tokens(text) if text.strip() else []
            if len(ids) <= _MIN_RESPONSE_TOKENS:
                results[i] = ScoreResult(None, True, {"reason": "paraphrase too short"})
                continue
            prompt = self.template.encode(ctx.context_messages, add_generation_prompt=True)
            prompt = prompt[-self.max_prompt_tokens :]
            cond.append(prompt + ids)
            asst.append(ids)
            keep.append((i, len(prompt), ids, text))
        if keep:
            floor = max(1, getattr(self.backend, "dp_world_size", 1))
            padded, n = pad_batch(cond, floor)
            cond_lp = self.backend.prompt_logprobs_ids(padded)[:n]
            padded, n = pad_batch(asst, floor)
            asst_lp = self.backend.prompt_logprobs_ids(padded)[:n]
            for (i, n_prompt, ids, text), c_ids, c_lp, a_lp in zip(keep, cond, cond_lp, asst_lp):
                s = chr_min_distinct(c_lp, a_lp, c_ids, ids, n_prompt)
                extras = {
                    "paraphrase_text": text,
                    "n_prompt": n_prompt,
                    "threshold": self.chr_min.threshold,
                }
                results[i] = ScoreResult(s, self.chr_min.passes(s), extras)
        return [r if r is not None else ScoreResult() for r in results]
