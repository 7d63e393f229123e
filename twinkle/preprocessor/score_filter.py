"""``ScoreFilter``: score assistant turns with model-based scorers and drop the rows that fail.

For each row the scored rounds are its ``key_rounds`` (from ``IntentClassifier``'s
``user_data``), else every assistant with text; ``intents=`` keeps only rounds of those
intents. Each round becomes a ``RoundContext``: the conversation before the reply encoded by
the chat template (the oldest non-system messages dropped until it fits
``max_prompt_tokens``, then the tail kept), the reply's token ids (at least 6), and both
joined. When a scorer needs logprobs, two batched ``prompt_logprobs_ids`` calls (padded to
the backend's data-parallel floor and trimmed back) give ``cond_lp`` and ``asst_lp``. A
round passes when every scorer passes.

Row decision: with no scorable round anywhere in the batch the rows pass untouched. A row
without a scorable round is dropped (``score_no_context``) if it named key rounds or
``intents`` was set, unless ``keep_if_no_key_rounds``. A row with key rounds is dropped when
all of them failed (``score_all_rounds_failed``), else kept with ``key_rounds`` narrowed to
the passing ones; a row without is dropped on any failure (``score_round_failed``) when
``drop_row_on_any_fail``. Kept rows carry ``user_data`` entry ``scores``
(``{assistant index: {scorer: score}}``).

Traces (``trace_dir``): one JSON file per round, ``score-{ok|fail}-{id}.json`` where id is
the row's ``id`` (else its batch index), the assistant index and a counter, with characters
outside ``[A-Za-z0-9_.-]`` replaced by ``_`` and cut to 64. The folder is created when
missing and never emptied. ``trace_callback(record)`` false skips a file;
``success_callback(record)`` picks the ok/fail part.

``ScoreFilter()`` without a backend raises a TypeError that says what to pass.

Example:
    >>> ScoreFilter()
    Traceback (most recent call last):
    ...
    TypeError: ScoreFilter needs a model: pass backend=SamplerBackend(HFSampler(...)) or ...
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from twinkle.data_format import message_text, pack_value, user_data_get
from twinkle.preprocessor.base import Row, drop, logger, malformed_reason, map_col_to_row
from twinkle.preprocessor.llm_backend import LLMBackend, pad_batch
from twinkle.preprocessor.scorers import (
    _MIN_RESPONSE_TOKENS,
    ChrMinScorer,
    RoundContext,
    ScoreResult,
    SIFDScorer,
)

NO_CONTEXT = "score_no_context"
ALL_FAILED = "score_all_rounds_failed"
ROUND_FAILED = "score_round_failed"
_NEEDS = (
    "ScoreFilter needs a model: pass backend=SamplerBackend(HFSampler(...)) or "
    "backend=OpenAIBackend(url, model) with template=ChatTemplate(tokenizer of that model); "
    "scorers default to [ChrMinScorer(), SIFDScorer()]"
)
_SAFE_RE = re.compile(r"[^A-Za-z0-9_\-.]+")
_trace_ids = itertools.count()


def _text(message: dict[str, Any]) -> str:
    return message_text(message).strip()


class ScoreFilter:
    """Drop rows whose scored assistant turns fail the scorers (see the module doc).

    Args:
        template: a ``ChatTemplate`` (or a tokenizer with a chat template) of the scored
            model; default: the backend's template (``SamplerBackend``).
        backend: ``OpenAIBackend`` or ``SamplerBackend``.
        scorers: default ``[ChrMinScorer(), SIFDScorer()]``.
        intents: score only rounds of these intents (IntentClassifier's ``intents``).
        keep_if_no_key_rounds: keep rows that have nothing to score.
        drop_row_on_any_fail: for rows without key rounds, drop on any failed round.
        max_prompt_tokens: prompt budget per round.
        trace_dir, trace_callback, success_callback: per-round JSON traces.
    """

    def __init__(
        self,
        template: Any = None,
        backend: LLMBackend | None = None,
        scorers: Sequence[Any] | None = None,
        intents: Sequence[str] | None = None,
        keep_if_no_key_rounds: bool = False,
        drop_row_on_any_fail: bool = True,
        max_prompt_tokens: int = 1024,
        trace_dir: str | None = None,
        trace_callback: Callable[[dict[str, Any]], Any] | None = None,
        success_callback: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        if backend is None:
            raise TypeError(_NEEDS)
        if template is None:
            template = getattr(backend, "template", None)
        if (
            template is not None
            and not hasattr(template, "encode_text")
            and hasattr(template, "apply_chat_template")  # a bare tokenizer
        ):
            from twinkle.sampler.template import ChatTemplate

            template = ChatTemplate(template)
        if template is None or not hasattr(template, "encode"):
            raise TypeError(
                "ScoreFilter needs template= (a twinkle.sampler.template.ChatTemplate over the "
                f"scored model's tokenizer) with {type(backend).__name__}"
            )
        self.template, self.backend = template, backend
        self.scorers = list(scorers) if scorers is not None else [ChrMinScorer(), SIFDScorer()]
        for s in self.scorers:
            if not callable(getattr(s, "score", None)) or not isinstance(
                getattr(s, "name", None), str
            ):
                raise TypeError(f"scorer {s!r} needs a str 'name' and a score(contexts) method")
        self.intents = set(intents) if intents is not None else None
        self.keep_if_no_key_rounds = keep_if_no_key_rounds
        self.drop_row_on_any_fail = drop_row_on_any_fail
        self.max_prompt_tokens = max_prompt_tokens
        self.trace_dir = Path(trace_dir) if trace_dir else None
        if self.trace_dir is not None:
            self.trace_dir.mkdir(parents=True, exist_ok=True)  # never emptied
        self.trace_callback, self.success_callback = trace_callback, success_callback

    @property
    def __name__(self) -> str:
        return "ScoreFilter"

    # -- contexts -------------------------------------------------------------------------------
    def _prompt_ids(self, ctx: list[dict[str, Any]], tools: Any) -> list[int]:
        ctx = list(ctx)
        while True:
            ids = self.template.encode(ctx, tools=tools, add_generation_prompt=True)
            if len(ids) <= self.max_prompt_tokens:
                return ids
            drop_at = next((i for i, m in enumerate(ctx[:-1]) if m.get("role") != "system"), None)
            if drop_at is None:
                return ids[-self.max_prompt_tokens :]
            del ctx[drop_at]

    def _reply_ids(self, text: str) -> list[int]:
        return list(self.template.tokenizer(text, add_special_tokens=False)["input_ids"])

    def build_contexts(self, row_idx: int, row: Row) -> tuple[list[RoundContext], bool]:
        """The row's scorable rounds, and whether it named key rounds."""
        messages = row["messages"]
        user_data = row.get("user_data")
        key_rounds = user_data_get(user_data, "key_rounds") if user_data else None
        had_keys = isinstance(key_rounds, list) and bool(key_rounds)
        intents = user_data_get(user_data, "intents") if user_data else None
        intents = intents if isinstance(intents, dict) else {}
        if had_keys:
            rounds = [k for k in key_rounds if isinstance(k, int) and not isinstance(k, bool)]
        else:
            rounds = [
                i
                for i, m in enumerate(messages)
                if isinstance(m, dict) and m.get("role") == "assistant"
            ]
        out = []
        for rnd_idx, idx in enumerate(rounds):
            intent = intents.get(str(idx), intents.get(idx))  # type: ignore[call-overload]
            if self.intents is not None and intent not in self.intents:
                continue
            if not 0 <= idx < len(messages) or not isinstance(messages[idx], dict):
                continue
            if messages[idx].get("role") != "assistant":
                continue
            text = _text(messages[idx])
            context = [m for m in messages[:idx] if isinstance(m, dict)]
            if not text or not context:
                continue
            asst_ids = self._reply_ids(text)
            if len(asst_ids) <= _MIN_RESPONSE_TOKENS:
                continue
            prompt_ids = self._prompt_ids(context, row.get("tools") or None)
            user_prompt = "\n\n".join(f"[{m.get('role')}] {_text(m)}" for m in context)
            out.append(
                RoundContext(
                    row_idx,
                    rnd_idx,
                    idx,
                    row,
                    intent,
                    messages,
                    context,
                    prompt_ids + asst_ids,
                    len(prompt_ids),
                    asst_ids,
                    text,
                    user_prompt,
                )
            )
        return out, had_keys

    def _add_logprobs(self, contexts: list[RoundContext]) -> None:
        floor = max(1, int(getattr(self.backend, "dp_world_size", 1) or 1))
        for key, batch in (
            ("cond_lp", [c.cond_ids for c in contexts]),
            ("asst_lp", [c.asst_ids for c in contexts]),
        ):
            padded, n = pad_batch(batch, floor)
            values = self.backend.prompt_logprobs_ids(padded)[:n]
            for ctx, lp in zip(contexts, values):
                ctx.features[key] = lp

    # -- the step -------------------------------------------------------------------------------
    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        rows = map_col_to_row(rows)
        dropped: list[Row] = []
        valid: list[tuple[int, Row]] = []
        for i, row in enumerate(rows):
            reason = malformed_reason(row)
            if reason:
                dropped.append(drop(row, reason))
            else:
                valid.append((i, row))
        per_row: dict[int, tuple[list[RoundContext], bool]] = {
            i: self.build_contexts(i, row) for i, row in valid
        }
        contexts = [c for ctxs, _ in per_row.values() for c in ctxs]
        if not contexts:
            return [row for _, row in valid], dropped
        if any(getattr(s, "requires_logprobs", False) for s in self.scorers):
            self._add_logprobs(contexts)
        results: dict[int, dict[str, ScoreResult]] = {id(c): {} for c in contexts}
        for scorer in self.scorers:
            scored = scorer.score(contexts)
            if len(scored) != len(contexts):
                raise RuntimeError(
                    f"scorer {scorer.name} returned {len(scored)} results "
                    f"for {len(contexts)} rounds"
                )
            for ctx, result in zip(contexts, scored):
                results[id(ctx)][scorer.name] = result
        self._log_summary(contexts, results)
        kept: list[Row] = []
        for i, row in valid:
            ctxs, had_keys = per_row[i]
            if not ctxs:
                if (had_keys or self.intents is not None) and not self.keep_if_no_key_rounds:
                    dropped.append(drop(row, NO_CONTEXT))
                else:
                    kept.append(row)
                continue
            passed = [c.asst_idx for c in ctxs if all(r.passed for r in results[id(c)].values())]
            for c in ctxs:
                self._trace(c, results[id(c)], c.asst_idx in passed)
            if had_keys and not passed:
                dropped.append(drop(row, ALL_FAILED))
            elif not had_keys and len(passed) < len(ctxs) and self.drop_row_on_any_fail:
                dropped.append(drop(row, ROUND_FAILED))
            else:
                kept.append(self._annotated(row, ctxs, results, passed if had_keys else None))
        return kept, dropped

    def _annotated(
        self,
        row: Row,
        ctxs: list[RoundContext],
        results: dict[int, dict[str, ScoreResult]],
        key_rounds: list[int] | None,
    ) -> Row:
        scores = {str(c.asst_idx): {n: r.score for n, r in results[id(c)].items()} for c in ctxs}
        entries = {"scores": pack_value(scores)}
        if key_rounds is not None:
            entries["key_rounds"] = pack_value(sorted(key_rounds))
        existing = row.get("user_data")
        if isinstance(existing, dict):
            user_data: Any = {**existing, **entries}
        else:
            user_data = [
                p
                for p in (existing if isinstance(existing, list) else [])
                if not (isinstance(p, (list, tuple)) and p and p[0] in entries)
            ] + [[k, v] for k, v in entries.items()]
        return {**row, "user_data": user_data}

    def _log_summary(
        self, contexts: list[RoundContext], results: dict[int, dict[str, ScoreResult]]
    ) -> None:
        for scorer in self.scorers:
            values = [results[id(c)][scorer.name] for c in contexts]
            nums = [v.score for v in values if isinstance(v.score, (int, float))]
            logger.info(
                "[ScoreFilter] %s: n=%d mean=%s min=%s max=%s passed=%d",
                scorer.name,
                len(values),
                round(sum(nums) / len(nums), 4) if nums else None,
                min(nums) if nums else None,
                max(nums) if nums else None,
                sum(1 for v in values if v.passed),
            )

    def _trace(self, ctx: RoundContext, results: dict[str, ScoreResult], kept: bool) -> None:
        if self.trace_dir is None:
            return
        try:
            record = {
                "row_idx": ctx.row_idx,
                "rnd_idx": ctx.rnd_idx,
                "asst_idx": ctx.asst_idx,
                "intent": ctx.intent,
                "messages": ctx.messages,
                "n_prompt": ctx.n_prompt,
                "cond_ids": ctx.cond_ids,
                "asst_ids": ctx.asst_ids,
                "features": ctx.features,
                "scores": {
                    n: {"score": r.score, "passed": r.passed, "extras": r.extras}
                    for n, r in results.items()
                },
                "kept": kept,
            }
            if self.trace_callback is not None and not self.trace_callback(record):
                return
            ok = self.success_callback(record) if self.success_callback else kept
            row_id = ctx.row.get("id", ctx.row_idx)
            ident = _SAFE_RE.sub("_", f"{row_id}-{ctx.asst_idx}-{next(_trace_ids)}")[:64]
            path = self.trace_dir / f"score-{'ok' if ok else 'fail'}-{ident}.json"
            path.write_text(json.dumps(record, ensure_ascii=False, indent=2, default=str))
        except Exception as exc:  # noqa: BLE001 - a trace must never fail the scoring
            logger.warning("ScoreFilter trace failed: %r", exc)
