"""Defective rows, each labelled with the defect and the variant that made it.

Duplicates copy (or copy and extend) an earlier clean row; dead loops add hesitation or
repeated reasoning, or repeat a tool call with the same output; refusals answer the first
turn or follow a tool call; token soup garbles the last answer; trivial greetings are two
short turns; over-long rounds paste a large log or read two huge files.

Example:
    >>> import random
    >>> rng = random.Random(0)
    >>> msgs, variant, dup_of = _defect_row(rng, "en", "trivial_greeting", False, 0, [])
    >>> variant, len(msgs), dup_of
    ('greeting', 2, None)
"""

from __future__ import annotations

import copy
import random
from typing import Any

from twinkle.data_format.synthetic.banks import common_bank, lang_bank
from twinkle.data_format.synthetic.conversation import (
    HOME,
    _agent_row,
    _Builder,
    _qa_row,
    _sep,
)
from twinkle.data_format.synthetic.labels import label_of

_SOUP_VARIANTS = (
    "mixed_script",
    "garbled_tail",
    "replacement_chars",
    "special_tokens",
    "char_repeat",
)


def _garble(rng: random.Random, n: int) -> str:
    garble = common_bank()["garble"]
    scripts = rng.sample(sorted(garble), rng.randint(4, 7))
    return " ".join(
        "".join(rng.choice(garble[rng.choice(scripts)]) for _ in range(rng.randint(1, 2)))
        for _ in range(n)
    )


def _inject_soup(rng: random.Random, msg: dict[str, Any]) -> str:
    variant = rng.choice(_SOUP_VARIANTS)
    text = msg.get("content") or ""
    head = text[: max(len(text) // 3, 20)]
    if variant == "mixed_script":
        msg["content"] = head + " " + _garble(rng, rng.randint(30, 80))
    elif variant == "garbled_tail":  # a whole, clean answer that derails at the very end
        msg["content"] = text + " " + _garble(rng, rng.randint(12, 20))
    elif variant == "replacement_chars":
        mangled = "".join(ch if rng.random() > 0.15 else "\ufffd" for ch in text[:400] or "output")
        msg["content"] = mangled
    elif variant == "special_tokens":
        tokens = common_bank()["special_tokens"]
        msg["content"] = head + "".join(rng.choice(tokens) for _ in range(rng.randint(22, 40)))
    else:
        msg["content"] = head + rng.choice(common_bank()["repeat_chars"]) * rng.randint(25, 80)
    return variant


def _loop_text(
    rng: random.Random, lang: str, sentences: list[str], n: int, cut: bool = False
) -> str:
    """A dead loop: a hesitation marker before every restated sentence (or, with ``cut``,
    every half-finished one, as a model that keeps interrupting itself writes)."""
    hesitation = lang_bank(lang)["hesitation"]
    parts = []
    for _ in range(n):
        parts.append(rng.choice(hesitation))
        sentence = rng.choice(sentences)
        if cut:
            end = rng.randint(25, 50) if lang == "en" else rng.randint(8, 16)
            sentence = sentence[:end] + "..."
        parts.append(sentence)
    return _sep(lang).join(parts)


def _repeat_tool_call(rng: random.Random, lang: str, messages: list[dict[str, Any]]) -> None:
    """The agent re-runs its first call and keeps getting the same answer."""
    i = next(j for j, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls"))
    call, result = messages[i], messages[i + 1]
    repeats = []
    for _ in range(rng.randint(4, 6)):
        c = copy.deepcopy(call)
        cid = f"call_{rng.getrandbits(48):012x}"
        c["tool_calls"][0]["id"] = cid
        c["content"] = rng.choice(lang_bank(lang)["step_intro"])
        repeats += [c, dict(result, tool_call_id=cid)]
    messages[i + 2 : i + 2] = repeats


def _inject_loop(rng: random.Random, lang: str, messages: list[dict[str, Any]], agent: bool) -> str:
    bank = lang_bank(lang)
    asst = [m for m in messages if m["role"] == "assistant"]
    sentences = bank["think"] + bank["filler"]
    variant = rng.choice(
        ("response_hesitation", "think_repetition", "think_hesitation")
        + (("tool_call_repeat",) if agent else ())
    )
    if variant == "tool_call_repeat":
        _repeat_tool_call(rng, lang, messages)
        return variant
    targets = rng.sample(asst, min(len(asst), 2 if agent else 1)) if agent else [asst[-1]]
    if agent and len(targets) < 2:
        targets = asst
    for msg in targets:
        if variant == "response_hesitation":
            msg["content"] = (
                (msg.get("content") or "")
                + ("\n\n" if msg.get("content") else "")
                + _loop_text(rng, lang, sentences, rng.randint(6, 12))
            )
            continue
        if variant == "think_repetition":
            block = _sep(lang).join(rng.sample(bank["think"], 3))
            loop = _sep(lang).join([block] * rng.randint(6, 10))
        else:
            loop = _loop_text(rng, lang, bank["think"], rng.randint(12, 20), cut=True)
        content = msg.get("content") or ""
        if "reasoning_content" in msg or rng.random() < 0.5:
            msg["reasoning_content"] = loop
        else:
            msg["content"] = (
                f"<think>\n{loop}\n</think>\n\n" + content.split("</think>")[-1].lstrip()
            )
    return variant


def _worker_log(rng: random.Random) -> str:
    """About 80 kB of log lines, the payload of an over-long round."""
    return "".join(
        f"2026-11-30T03:{i // 60 % 60:02d}:{i % 60:02d}Z worker-{i % 7} processed batch {i}"
        f" in {rng.randint(5, 900)} ms\n"
        for i in range(1100)
    )


def _refusal_row(rng: random.Random, lang: str, agent: bool) -> tuple[list[dict[str, Any]], str]:
    bank = lang_bank(lang)
    text = rng.choice(bank["refusals"]) + rng.choice(bank["refusal_tail"])
    if not agent:
        question = rng.choice(bank["qa"])["question"]
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": text}]
        return messages, "first_reply"
    b = _Builder(rng, lang)
    b.messages.append({"role": "system", "content": rng.choice(bank["system"])})
    b.messages.append({"role": "user", "content": bank["harmful_ask"]})
    task = common_bank()["harmful_task"]
    b.tool_step("read_file", {"path": f"{HOME}/task.txt"}, task, "", b.think(2), "field")
    b.assistant(text)
    return b.messages, "after_tool_call"


def _defect_row(
    rng: random.Random,
    lang: str,
    defect: str,
    agent: bool,
    target_bytes: int,
    history: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], str, str | None]:
    """Messages for a defective row, the variant name, and the id it duplicates (if any).

    A duplicate needs an earlier clean row of the same language and kind in ``history``;
    without one the row becomes a dead loop instead.
    """
    if defect in ("exact_duplicate", "near_duplicate"):
        same = [r for r in history if label_of(r)["lang"] == lang and label_of(r)["agent"] == agent]
        if same:
            src = rng.choice(same)
            msgs = copy.deepcopy(src["messages"])
            if defect == "near_duplicate":
                last = msgs[-1]
                extra = rng.choice(lang_bank(lang)["filler"])
                last["content"] = (last.get("content") or "") + _sep(lang) + extra
            return msgs, "copy", src["id"]
        defect = "dead_loop"
    if defect == "trivial_greeting":
        greeting = rng.choice(lang_bank(lang)["greetings"])
        messages = [
            {"role": "user", "content": greeting["user"]},
            {"role": "assistant", "content": greeting["assistant"]},
        ]
        return messages, "greeting", None
    if defect == "refusal":
        return (*_refusal_row(rng, lang, agent), None)
    msgs = _agent_row(rng, lang, target_bytes) if agent else _qa_row(rng, lang, target_bytes)
    if defect == "dead_loop":
        return msgs, _inject_loop(rng, lang, msgs, agent), None
    if defect == "token_soup":
        asst = [m for m in msgs if m["role"] == "assistant"]
        return msgs, _inject_soup(rng, asst[-1]), None
    # round_too_long: a pasted log (plain rows) or two huge file reads (agent rows) in one round
    log = _worker_log(rng)
    if agent:
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        b = _Builder(rng, lang)
        b.tool_step("read_file", {"path": f"{HOME}/worker.log"}, log[:32000])
        b.tool_step("read_file", {"path": f"{HOME}/worker.old.log"}, log[-32000:])
        msgs[users[0] + 1 : users[0] + 1] = b.messages
        return msgs, "huge_tool_outputs", None
    msgs[0]["content"] = msgs[0]["content"] + "\n\n" + log + log[:8000]
    return msgs, "huge_paste", None
