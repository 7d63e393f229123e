"""Curation benchmark: speed, recall and false positives of the rule filters, and dedup at scale.

Prints one JSON object:

- ``speed``: rows/s and MB/s per filter and for the chain Hard -> DeadLoop -> Refuse ->
  TokenSoup -> MessageNormalizer on ~4 KB agent rows (single process, one core), ours and a
  naive baseline in the same run (the same rules written the straightforward way:
  per-character Python loops for dead-loop and token-soup checks). CPU
  time (``time.process_time``, best of ``--repeats``) is the headline figure because the
  benchmark machine is shared; wall-clock figures are printed beside it.
  ``HardFilter.plain_ratio`` is HardFilter's CPU time over a plain per-row check of the
  same rules (``PlainHardFilter``: string content, no think-block or tool-call
  normalisation); ``default_chain`` is the whole default chain as ``twinkle curate`` runs
  it (``build_pipeline()`` + ``curate_rows``, global dedup included) beside the plain
  version (naive dedup, PlainHardFilter, the naive dead-loop and token-soup filters).
- ``eval_set``: the hand-written, labelled set ``bench/data/curation_eval.jsonl`` (EN/ZH/
  JA/KO) through the default chain: precision and recall per drop reason, recall per
  reason and language, the outcome per labelled class, and the false-drop rate on clean
  rows.
- ``quality``: on a labelled synthetic set (``twinkle.synthetic``), each filter's recall per
  targeted defect, per language and on tool-call rows, and its false-positive rate on clean
  rows per language and on clean tool-call rows.
- ``dedup``: exact dedup (``DedupFilter``) of ``--dedup-rows`` rows (1,000,000 by default)
  in a fresh subprocess: rows/s and peak RSS above the loaded data, against a naive
  dict-of-JSON-hashes baseline.

- ``stream`` (``--stream ROWS...``): ``twinkle curate`` streaming against the in-memory path
  on ~4.7 KB rows at each size: peak RSS, wall time, exact-dedup seconds, near-dedup MB/s per
  core (``bench/curation_scale.py``, which also measures Ray with ``--ray``).

Usage: ``python bench/curation.py [--quick] [--stream 100000 200000]``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # run from a checkout without installing

from twinkle.data_format import message_text, normalize_tool_calls, split_think
from twinkle.preprocessor.base import Filter
from twinkle.preprocessor.chain import build_pipeline, curate_rows
from twinkle.preprocessor.dead_loop_filter import DeadLoopFilter
from twinkle.preprocessor.evaluation import chain_reasons, load_labelled, score
from twinkle.preprocessor.hard_filter import HardFilter, text_width
from twinkle.preprocessor.refuse_filter import RefuseFilter
from twinkle.preprocessor.token_soup import TokenSoupFilter, _script_of
from twinkle.synthetic import DEFECT_TARGETS, generate, label_of


def _optional(module: str, name: str) -> Any:
    try:
        mod = __import__(module, fromlist=[name])
        return getattr(mod, name)
    except (ImportError, AttributeError):
        return None


MessageNormalizer = _optional("twinkle.preprocessor.message_normalizer", "MessageNormalizer")
DedupFilter = _optional("twinkle.preprocessor.dedup_filter", "DedupFilter")
NearDedupFilter = _optional("twinkle.preprocessor.dedup_filter", "NearDedupFilter")


# ----------------------------------------------------------------- naive baseline
# The same rules, written the straightforward way the optimized filters are measured against:
# characters inspected one by one in Python, one big case-insensitive alternation, tuples built
# in Python loops.
_NAIVE_HESITATION = re.compile(
    r"\b(?:wait[ ,]*\.{2,}|wait[ ,]+(?:wait|no|actually|hmm|let)|no,? wait|oh,? wait|but wait"
    r"|hmm+|uh+m*"
    r"|actually,? (?:no|wait|i was)|no, actually"
    r"|let me (?:re-?think|try again|start over|reconsider)"
    r"|i'?ll (?:start over|try again|redo this)"
    r"|i'?m (?:getting confused|going in circles|lost here)"
    r"|i keep making|this is getting)\b"
    r"|等等|不不不+|嗯{2,}|呃+|让我(?:重新|再次|再)(?:想|试|来|考虑|计算)|我(?:好像|似乎|又)(?:搞|弄)错"
    r"|ちょっと待って|いや待って|えっと+|うーん+|もう一度考え直|混乱してきた"
    r"|잠깐|(?<![가-힣])(?:음+|어+)(?=\s*[.…,~!?])|다시 ?(?:생각|시작|해보)"
    r"|헷갈|계속 ?(?:틀리|실수)",
    re.IGNORECASE,
)
_NAIVE_CASCADE = re.compile(
    r"\b(?:wait|actually|hmm|i was wrong|i made an? (?:error|mistake))\b|等等|不对|重新|错了",
    re.IGNORECASE,
)


def _naive_cjk_ratio(text: str) -> float:
    cjk = total = 0
    for ch in text:
        if ch in " \n\t":
            continue
        total += 1
        cp = ord(ch)
        if 0x3040 <= cp <= 0x30FF or 0x4E00 <= cp <= 0x9FFF or 0xAC00 <= cp <= 0xD7A3:
            cjk += 1
    return cjk / total if total else 0.0


def _naive_stuck(text: str, density: float, cascade: int, repetition: float) -> bool:
    if not text:
        return False
    marks = [m.start() for m in _NAIVE_HESITATION.finditer(text)]
    if len(marks) >= 3 and len(marks) * 1000 / max(len(text), 1) > density:
        return True
    pos = [m.start() for m in _NAIVE_CASCADE.finditer(text)]
    for i in range(len(pos) - cascade + 1):
        if pos[i + cascade - 1] - pos[i] <= 800:
            return True
    if _naive_cjk_ratio(text[:500]) > 0.3:
        tokens = [ch for ch in text if ch not in " \n"]
        if len(tokens) < 240:
            return False
    else:
        tokens = text.split()
        if len(tokens) < 30:
            return False
    grams = []
    for i in range(len(tokens) - 7):
        grams.append(tuple(tokens[i : i + 8]))
    return bool(grams) and 1 - len(set(grams)) / len(grams) > repetition


class NaiveDeadLoopFilter(Filter):
    def check(self, row: dict[str, Any]) -> str | None:
        stuck = 0
        agent = False
        for msg in row["messages"]:
            if not isinstance(msg, dict):
                continue
            agent = agent or msg.get("role") == "tool" or normalize_tool_calls(msg) is not None
            if msg.get("role") != "assistant":
                continue
            response, think = split_think(message_text(msg))
            think = think or msg.get("reasoning_content") or ""
            if _naive_stuck(think, 15.0, 20, 0.65) or _naive_stuck(response.strip(), 7.0, 5, 0.45):
                stuck += 1
        return "dead_loop" if stuck and (not agent or stuck >= 2) else None


def _naive_soup(text: str) -> bool:
    n = max(len(text), 1)
    repl = ctrl = priv = 0
    run = 0
    prev = ""
    buckets = []
    for ch in text:
        cp = ord(ch)
        if cp == 0xFFFD:
            repl += 1
        elif cp < 32 and ch not in "\t\n\r" or cp == 0x7F:
            ctrl += 1
        elif 0xE000 <= cp <= 0xF8FF or cp >= 0xF0000:
            priv += 1
        run = run + 1 if ch == prev else 1
        prev = ch
        if run >= 20 and not ch.isspace() and ch not in "-=_.*+~#|><0123456789ー":
            return True
        if unicodedata.category(ch)[0] in "LN":
            b = _script_of(cp)
            buckets.append("cjk" if b in ("hiragana", "katakana") else b)
    if repl / n > 0.02 or ctrl / n > 0.01 or priv / n > 0.03:
        return True
    runs = []
    for b in buckets:
        if not runs or runs[-1] != b:
            runs.append(b)
    if len(buckets) < 40 or len(runs) < 8:
        return False
    chaotic = sum(1 for i in range(len(runs) - 3) if len(set(runs[i : i + 4])) >= 3)
    return chaotic / (len(runs) - 3) > 0.55


class NaiveTokenSoupFilter(Filter):
    def check(self, row: dict[str, Any]) -> str | None:
        for msg in row["messages"]:
            if (
                isinstance(msg, dict)
                and msg.get("role") == "assistant"
                and _naive_soup(message_text(msg).strip())
            ):
                return "token_soup"
        return None


class PlainHardFilter(Filter):
    """HardFilter's rules as the plain per-row check: string content read directly,
    ``tool_calls`` by truthiness, no think-block splitting or tool-call normalisation. The
    regexes and the complete-answer test are HardFilter's own, so only the row handling
    differs."""

    def __init__(self, hf: HardFilter) -> None:
        self.hf = hf

    def check(self, row: dict[str, Any]) -> str | None:
        hf = self.hf
        msgs = row["messages"]
        users = [m.get("content") or "" for m in msgs if m.get("role") == "user"]
        asst = [m for m in msgs if m.get("role") == "assistant"]
        if not users:
            return "no_user"
        first = asst[0] if asst else None
        if len(users) == 1:
            kind = hf.query_kind(users[0])
            if kind is not None:
                if first is None:
                    return "trivial_single_turn"
                reply = first.get("content") or ""
                if (
                    len(first.get("reasoning_content") or "") < hf.min_thinking_chars
                    and not first.get("tool_calls")
                    and (kind == "greeting" or text_width(reply) < hf.substantive_answer_chars)
                ):
                    return "trivial_single_turn"
            if len(asst) == 1:
                reply = first.get("content") or ""
                if (
                    len(first.get("reasoning_content") or "") < hf.min_thinking_chars
                    and not first.get("tool_calls")
                    and text_width(reply) < hf.min_assistant_chars_2turn
                    and not hf.is_complete_answer(reply)
                ):
                    return "shallow_reply"
        if asst and not any(
            (m.get("content") or "").strip() or m.get("tool_calls") or m.get("reasoning_content")
            for m in asst
        ):
            return "all_empty_assistant"
        total = 0
        current = None
        for m in msgs:
            size = len(m.get("content") or "") + len(m.get("reasoning_content") or "")
            for call in m.get("tool_calls") or ():
                size += len(call["function"]["arguments"])
            total += size
            if m.get("role") == "user":
                current = size
            elif current is not None:
                current += size
            if current is not None and current > hf.max_chars_per_round:
                return "round_too_long"
        if total > hf.max_total_chars:
            return "total_too_long"
        return None


# ------------------------------------------------------------------------ helpers
def _cpu_and_wall(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Best CPU and wall seconds of ``fn()`` over ``repeats``, and its last result."""
    best_cpu = best_wall = float("inf")
    result = None
    for _ in range(repeats):
        result = None  # the previous result is freed before the timed call, as before
        gc.collect()
        c0, w0 = time.process_time(), time.perf_counter()
        result = fn()
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    return best_cpu, best_wall, result


def _outcome(kept: list[Any], dropped: Any) -> tuple[list[Any], list[str]]:
    """Kept row ids and drop reasons of a step's ``(kept, dropped)``; ``dropped`` is a list of
    dropped rows, a list of such lists (``_chain``) or ``curate_rows``'s ``PipelineStats``."""
    if hasattr(dropped, "dropped"):  # PipelineStats: {step: {reason: count}}
        reasons = [r for counts in dropped.dropped().values() for r in counts]
    else:
        flat = [d for d in dropped if isinstance(d, dict)]
        flat += [x for d in dropped if isinstance(d, list) for x in d]
        reasons = [d.get("drop_reason", "") for d in flat]
    return [r["id"] for r in kept], reasons


def check_same_work(what: str, ours: Any, base: Any = None) -> None:
    """Refuse a figure whose sides did not do the same, successful work: a step that raised
    (a ``malformed_*`` drop) is cheaper, and ours and the baseline must keep the same rows."""
    sides = {"ours": _outcome(*ours)} | ({"baseline": _outcome(*base)} if base else {})
    for side, (_, reasons) in sides.items():
        bad = sorted({r for r in reasons if r.startswith("malformed")})
        if bad:  # the bench rows are well formed: a malformed drop means a step raised
            raise RuntimeError(f"{what}: {side} dropped rows as {bad}; no figure reported")
    if base and sides["ours"][0] != sides["baseline"][0]:
        a, b = sides["ours"][0], sides["baseline"][0]
        raise RuntimeError(
            f"{what}: ours kept {len(a)} rows, the baseline {len(b)}, not the same rows "
            f"({len(set(a) ^ set(b))} differ); the two sides did different work, no figure"
        )


def _rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else float("inf")


def _chain(steps: list[Any]) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    def run(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[Any]]]:
        drops = []  # each step's dropped rows, for check_same_work (one append a step)
        for step in steps:
            rows, dropped = step(rows)
            drops.append(dropped)
        return rows, drops

    return run


def bench_speed(n_rows: int, repeats: int) -> dict[str, Any]:
    rows = generate(n_rows, seed=11, target_bytes=4096)
    size = sum(len(json.dumps(r, ensure_ascii=False).encode()) for r in rows)
    mb = size / 1e6
    ours = {
        "HardFilter": HardFilter(max_chars_per_round=50000, max_total_chars=200000),
        "DeadLoopFilter": DeadLoopFilter(),
        "RefuseFilter": RefuseFilter(),
        "TokenSoupFilter": TokenSoupFilter(),
    }
    if MessageNormalizer is not None:
        ours["MessageNormalizer"] = MessageNormalizer()
    naive = dict(ours, DeadLoopFilter=NaiveDeadLoopFilter(), TokenSoupFilter=NaiveTokenSoupFilter())
    for step in ours.values():  # warm caches (lookup tables, the lazy numpy import)
        step(rows[:200])
    out: dict[str, Any] = {"rows": n_rows, "avg_row_bytes": round(size / n_rows), "filters": {}}
    for name, step in ours.items():
        cpu, wall, res = _cpu_and_wall(lambda s=step: s(rows), repeats)
        check_same_work(name, res)
        out["filters"][name] = {
            "rows_per_s": _rate(n_rows, cpu),
            "mb_per_s": round(mb / cpu, 2),
            "rows_per_s_wall": _rate(n_rows, wall),
        }
    for name in ("DeadLoopFilter", "TokenSoupFilter"):
        cpu, _, res = _cpu_and_wall(lambda s=naive[name]: s(rows), 1)
        check_same_work(name, ours[name](rows), res)  # ours again, untimed
        out["filters"][name]["naive_rows_per_s"] = _rate(n_rows, cpu)
        out["filters"][name]["speedup_vs_naive"] = round(
            out["filters"][name]["rows_per_s"] / _rate(n_rows, cpu), 1
        )
    plain = PlainHardFilter(ours["HardFilter"])
    pcpu, _, res = _cpu_and_wall(lambda: plain(rows), repeats)
    check_same_work("HardFilter", ours["HardFilter"](rows), res)  # the same rules, rows
    hard = out["filters"]["HardFilter"]
    hard["plain_rows_per_s"] = _rate(n_rows, pcpu)
    hard["plain_ratio"] = round(hard["plain_rows_per_s"] / hard["rows_per_s"], 2)
    stages = build_pipeline()
    cpu, wall, res = _cpu_and_wall(lambda: curate_rows(rows, stages), repeats)
    plain_steps = [lambda r: _naive_dedup(r), plain, *list(naive.values())[1:]]
    ncpu, nwall, nres = _cpu_and_wall(lambda: _chain(plain_steps)(rows), 1)
    check_same_work("default_chain", res, nres)
    out["default_chain"] = {
        "steps": [s.name for s in stages],
        "rows_per_s": _rate(n_rows, cpu),
        "rows_per_s_wall": _rate(n_rows, wall),
        "plain_rows_per_s": _rate(n_rows, ncpu),
        "plain_rows_per_s_wall": _rate(n_rows, nwall),
    }
    cpu, wall, res = _cpu_and_wall(lambda: _chain(list(ours.values()))(rows), repeats)
    ncpu, nwall, nres = _cpu_and_wall(lambda: _chain(list(naive.values()))(rows), 1)
    check_same_work("chain", res, nres)
    out["chain"] = {
        "steps": list(ours),
        "rows_per_s": _rate(n_rows, cpu),
        "mb_per_s": round(mb / cpu, 2),
        "rows_per_s_wall": _rate(n_rows, wall),
        "naive_rows_per_s": _rate(n_rows, ncpu),
        "naive_rows_per_s_wall": _rate(n_rows, nwall),
        "speedup_vs_naive": round(ncpu / cpu, 1),
    }
    return out


def bench_quality(n_rows: int) -> dict[str, Any]:
    rows = generate(n_rows, seed=3, defects=True, defect_rate=0.35, target_bytes=4096)
    labels = {r["id"]: label_of(r) for r in rows}
    filters: dict[str, Any] = {
        "HardFilter": HardFilter(max_chars_per_round=50000, max_total_chars=200000),
        "DeadLoopFilter": DeadLoopFilter(),
        "RefuseFilter": RefuseFilter(),
        "TokenSoupFilter": TokenSoupFilter(),
    }
    if DedupFilter is not None:
        filters["DedupFilter"] = DedupFilter()
    if NearDedupFilter is not None:
        filters["NearDedupFilter"] = NearDedupFilter()
    originals = {lab["dup_of"] for lab in labels.values() if lab["dup_of"]}
    out: dict[str, Any] = {
        "rows": n_rows,
        "clean_rows": sum(lab["defect"] == "none" for lab in labels.values()),
        "filters": {},
    }
    worst_recall, worst_fp = 1.0, 0.0
    for name, step in filters.items():
        _, dropped = step(rows)
        gone = {d["id"] for d in dropped if isinstance(d, dict) and "id" in d}
        hits: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
        fps: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for rid, lab in labels.items():
            defect = lab["defect"]
            if defect == "none":
                # A dedup filter that keeps the longer near-duplicate drops the original:
                # that is the pair being caught, not a false positive.
                is_fp = rid in gone and not (name.endswith("DedupFilter") and rid in originals)
                for key in (lab["lang"],) + (("tool_call_rows",) if lab["agent"] else ()):
                    fps[key][0] += is_fp
                    fps[key][1] += 1
                continue
            targeted = DEFECT_TARGETS[defect] == name or (
                name == "NearDedupFilter" and defect == "exact_duplicate"
            )
            if not targeted:
                continue
            caught = rid in gone or (lab["dup_of"] in gone)
            for key in (
                (defect, lab["lang"]),
                (defect, "tool_call_rows") if lab["agent"] else None,
                (defect, "all"),
            ):
                if key:
                    hits[key][0] += caught
                    hits[key][1] += 1
        recall: dict[str, dict[str, Any]] = defaultdict(dict)
        for (defect, where), (got, total) in sorted(hits.items()):
            recall[defect][where] = {"recall": round(got / total, 4), "n": total}
            worst_recall = min(worst_recall, got / total)
        fp = {k: {"fp_rate": round(a / b, 4), "n": b} for k, (a, b) in sorted(fps.items())}
        if not name.endswith("DedupFilter"):
            worst_fp = max([worst_fp] + [a / b for a, b in fps.values() if b])
        out["filters"][name] = {"recall": dict(recall), "false_positives": fp}
    out["worst_recall"] = round(worst_recall, 4)
    out["worst_rule_filter_fp_rate"] = round(worst_fp, 4)
    return out


# ---------------------------------------------------------------------- eval set
EVAL_SET = Path(__file__).resolve().parent / "data" / "curation_eval.jsonl"


def bench_eval_set(path: Path = EVAL_SET) -> dict[str, Any]:
    """The default chain on the hand-written, labelled evaluation set."""
    rows = load_labelled(path)
    report = score(rows, chain_reasons(rows))
    report["worst_recall_per_class_and_language"] = min(
        f["correct"]
        for cls, langs in report["by_class"].items()
        if not cls.startswith("clean/")
        for f in langs.values()
    )
    report["worst_precision"] = min(
        f["precision"] for f in report["reasons"].values() if f["precision"] is not None
    )
    return report


# -------------------------------------------------------------------------- dedup
def _dedup_rows(n: int) -> list[dict[str, Any]]:
    """``n`` small conversations, one in ten an exact copy of an earlier one."""
    import random

    rng = random.Random(5)
    rows = []
    for i in range(n):
        if i and rng.random() < 0.1:
            rows.append({"id": f"d{i}", "messages": rows[rng.randrange(i)]["messages"]})
            continue
        a, b = rng.randrange(10**9), rng.randrange(10**9)
        rows.append(
            {
                "id": f"d{i}",
                "messages": [
                    {
                        "role": "system",
                        "content": "You are a careful assistant with a Linux sandbox.",
                    },
                    {
                        "role": "user",
                        "content": f"Compute {a} * {b} with python3 and report the exact product, "
                        "please.",
                    },
                    {
                        "role": "assistant",
                        "content": f"Running it in the sandbox: {a} * {b} = {a * b}. Done.",
                    },
                ],
            }
        )
    return rows


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _naive_dedup(rows: list[dict[str, Any]]) -> tuple[list, list]:
    best: dict[str, tuple[int, int]] = {}
    for i, row in enumerate(rows):
        msgs = row["messages"]
        user = next((m["content"] for m in msgs if m.get("role") == "user"), "")
        asst = next((m["content"] for m in msgs if m.get("role") == "assistant"), "")
        sig = hashlib.md5(
            json.dumps([user[:100], user[-100:], asst[:100], asst[-100:]]).encode()
        ).hexdigest()
        size = len(json.dumps(msgs))
        if sig not in best or size > best[sig][0]:
            best[sig] = (size, i)
    keep = {i for _, i in best.values()}
    return [r for i, r in enumerate(rows) if i in keep], [
        dict(r, drop_reason="duplicate") for i, r in enumerate(rows) if i not in keep
    ]


def dedup_child(n: int, which: str) -> dict[str, Any]:
    rows = _dedup_rows(n)
    gc.collect()
    base = _rss_bytes()
    step = DedupFilter() if which == "ours" else _naive_dedup
    c0, w0 = time.process_time(), time.perf_counter()
    kept, dropped = step(rows)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ids = "\n".join(r["id"] for r in kept).encode()
    return {
        # For bench_dedup's check (removed before printing): which rows, and any step errors.
        "kept_ids_md5": hashlib.md5(ids).hexdigest(),
        "malformed": sum(d.get("drop_reason", "").startswith("malformed") for d in dropped),
        "rows": n,
        "kept": len(kept),
        "dropped": len(dropped),
        "seconds_cpu": round(cpu, 2),
        "seconds_wall": round(wall, 2),
        "rows_per_s": _rate(n, cpu),
        "peak_mb_above_loaded_data": round(max(peak - base, 0) / 2**20, 1),
    }


def check_dedup(ours: dict[str, Any], naive: dict[str, Any]) -> None:
    """Exact copies only: both sides must keep the same rows, and neither may drop a row
    as malformed (a signature that raised is cheaper). Pops the check-only fields."""
    digests = [side.pop("kept_ids_md5") for side in (ours, naive)]
    malformed = [side.pop("malformed") for side in (ours, naive)]
    if any(malformed):
        raise RuntimeError(f"dedup: malformed drops (ours, naive) = {malformed}; no figure")
    same_ids = digests[0] == digests[1]
    if (ours["kept"], ours["dropped"]) != (naive["kept"], naive["dropped"]) or not same_ids:
        raise RuntimeError(
            f"dedup: ours kept/dropped {ours['kept']}/{ours['dropped']}, naive "
            f"{naive['kept']}/{naive['dropped']} (same kept ids: {same_ids}); "
            "the two sides did different work, no figure"
        )


def bench_dedup(n: int) -> dict[str, Any]:
    if DedupFilter is None:
        return {"skipped": "twinkle.preprocessor.dedup_filter.DedupFilter not available"}
    out = {}
    for which in ("ours", "naive"):
        proc = subprocess.run(
            [sys.executable, __file__, "--dedup-child", str(n), which],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            return {"error": proc.stderr[-2000:]}
        out[which] = json.loads(proc.stdout)
    check_dedup(out["ours"], out["naive"])
    out["speedup_vs_naive"] = round(out["ours"]["rows_per_s"] / out["naive"]["rows_per_s"], 2)
    return out


def main() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(
            var, "1"
        )  # one core: numpy (imported lazily by the filters) must not spawn threads
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for a fast check")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--eval-set", default=str(EVAL_SET), help="labelled JSONL set (default: %(default)s)"
    )
    parser.add_argument("--dedup-child", nargs=2, metavar=("ROWS", "WHICH"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--stream", type=int, nargs="+", metavar="ROWS",
        help="also streaming vs in-memory twinkle curate at these sizes (bench/curation_scale.py)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.dedup_child:
        print(json.dumps(dedup_child(int(args.dedup_child[0]), args.dedup_child[1])))
        return
    speed_rows, quality_rows, dedup_rows = (
        (600, 1500, 100_000) if args.quick else (3000, 8000, 1_000_000)
    )
    speed = bench_speed(speed_rows, 2 if args.quick else args.repeats)
    quality = bench_quality(quality_rows)
    eval_set = bench_eval_set(Path(args.eval_set))
    dedup = bench_dedup(dedup_rows)
    result = {
        "quick": args.quick,
        "speed": speed,
        "quality": quality,
        "eval_set": eval_set,
        "dedup": dedup,
        "targets": {
            "chain_rows_per_s>=5000": speed["chain"]["rows_per_s"] >= 5000,
            "default_chain_rows_per_s>=5000": speed["default_chain"]["rows_per_s"] >= 5000,
            "hard_filter_within_1.5x_of_plain": speed["filters"]["HardFilter"]["plain_ratio"]
            <= 1.5,
            "eval_recall>=0.95": eval_set["worst_recall_per_class_and_language"] >= 0.95,
            "eval_precision>=0.9": eval_set["worst_precision"] >= 0.9,
            "eval_false_drops<=0.005": eval_set["false_drop_rate"] <= 0.005,
            "recall>=0.95": quality["worst_recall"] >= 0.95,
            "rule_filter_fp<=0.005": quality["worst_rule_filter_fp_rate"] <= 0.005,
            "dedup_1m_under_10s_cpu": (dedup.get("ours", {}).get("seconds_cpu", 1e9) < 10)
            if not args.quick
            else None,
            "dedup_peak_under_150mb": (
                dedup.get("ours", {}).get("peak_mb_above_loaded_data", 1e9) < 150
            )
            if not args.quick
            else None,
        },
    }
    if args.stream:  # peak RSS and wall time at scale, beside the in-memory path
        scale = [sys.executable, str(Path(__file__).with_name("curation_scale.py")), "--memory"]
        proc = subprocess.run(
            [*scale, "--rows", *map(str, args.stream)], capture_output=True, text=True
        )
        result["stream"] = json.loads(proc.stdout) if proc.returncode == 0 else proc.stderr[-2000:]
    print(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
