"""Clean conversations: sandbox tasks solved with tool calls, and tool-free question/answer rows.

Every tool result is what a Linux sandbox with ``python3`` prints for the call (files live
under :data:`HOME`; command output follows ``twinkle.envs.base.format_command_output``), so
the rows can be replayed against a real shell. All randomness comes from the caller's
``random.Random``: the same generator state gives the same conversation.

Example:
    >>> import random
    >>> msgs = _agent_row(random.Random(0), "en", 0)
    >>> [m["role"] for m in msgs[:3]]
    ['system', 'user', 'assistant']
    >>> TOOLS[0]["function"]["name"]
    'run_command'
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from twinkle.data_format.synthetic.banks import common_bank, lang_bank
from twinkle.data_format.synthetic.labels import LANGS
from twinkle.envs.base import format_command_output

MODELS = ("qwen3.5-32b", "qwen3.5-4b", "deepseek-v3.1", "glm-4.6")
HOME = "/home/user"

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a shell command in the sandbox and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "Shell command."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write text to a file in the sandbox.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file from the sandbox.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
]

#: The task kinds; the order is part of the seed's output, as ``rng.choice`` picks by position.
_TASKS = ("multiply", "sort", "sha256", "script", "note", "wc", "json_port")


def _fib(n: int) -> list[int]:
    a, b, out = 0, 1, []
    for _ in range(n):
        out.append(a)
        a, b = b, a + b
    return out


def _is_prime(p: int) -> bool:
    return p > 1 and all(p % d for d in range(2, int(p**0.5) + 1))


# Each script's source and a Python function that computes what the script prints: the two
# live side by side because the tool output must match a real run of the source.
_SCRIPTS = {
    "fib": (
        (
            "def fib(n):\n"
            "    a, b = 0, 1\n"
            "    out = []\n"
            "    for _ in range(n):\n"
            "        out.append(a)\n"
            "        a, b = b, a + b\n"
            "    return out\n"
            "\n\n"
            "print(fib({n}))\n"
        ),
        lambda n: str(_fib(n)),
    ),
    "primes": (
        (
            "def is_prime(p):\n"
            "    return p > 1 and all(p % d for d in range(2, int(p ** 0.5) + 1))\n"
            "\n\n"
            "print([p for p in range({n}) if is_prime(p)])\n"
        ),
        lambda n: str([p for p in range(n) if _is_prime(p)]),
    ),
    "squares": (
        (
            "total = sum(i * i for i in range(1, {n} + 1))\n"
            "print(f'sum of squares 1..{n} = {{total}}')\n"
        ),
        lambda n: f"sum of squares 1..{n} = {sum(i * i for i in range(1, n + 1))}",
    ),
}


def _sep(lang: str) -> str:
    """What joins sentences: a space in English, nothing in Chinese, Japanese and Korean."""
    return " " if lang == "en" else ""


def _follow_up(lang: str, text: str) -> str:
    follow = lang_bank(lang)["follow_up"]
    return f"{follow} {text}" if lang in ("en", "ko") else follow + text


class _Builder:
    """Builds one conversation; all randomness comes from the shared ``random.Random``."""

    def __init__(self, rng: random.Random, lang: str) -> None:
        self.rng = rng
        self.lang = lang
        self.messages: list[dict[str, Any]] = []

    def call_id(self) -> str:
        return f"call_{self.rng.getrandbits(48):012x}"

    def think(self, k: int | None = None) -> str:
        pool = lang_bank(self.lang)["think"]
        return _sep(self.lang).join(self.rng.sample(pool, k or self.rng.randint(2, 4)))

    def fillers(self, k: int) -> list[str]:
        pool = lang_bank(self.lang)["filler"]
        return self.rng.sample(pool, min(k, len(pool)))

    def assistant(
        self,
        content: str,
        reasoning: str = "",
        calls: list[dict[str, Any]] | None = None,
        think_style: str = "inline",
    ) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            if think_style == "inline":
                msg["content"] = f"<think>\n{reasoning}\n</think>\n\n{content}".rstrip()
            else:
                msg["reasoning_content"] = reasoning
        if calls:
            msg["tool_calls"] = calls
        self.messages.append(msg)
        return msg

    def tool_step(
        self,
        name: str,
        args: dict[str, Any],
        output: str,
        intro: str = "",
        reasoning: str = "",
        think_style: str = "inline",
    ) -> None:
        cid = self.call_id()
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }
        self.assistant(intro, reasoning, [call], think_style)
        self.messages.append({"role": "tool", "tool_call_id": cid, "name": name, "content": output})


def _shell(out: str) -> str:
    """The sandbox's answer to a command that prints ``out`` and exits 0."""
    return format_command_output(out + "\n", "", 0)


def _task(
    rng: random.Random, lang: str, kind: str, k: int
) -> tuple[str, list[tuple[str, dict, str]], str]:
    """A task's user request, tool steps ``(tool, args, output)`` and final-answer opening."""
    common = common_bank()
    v: dict[str, Any] = {}
    steps: list[tuple[str, dict[str, Any], str]] = []
    if kind == "multiply":
        v["a"], v["b"] = rng.randint(12, 9999), rng.randint(12, 999)
        out = str(v["a"] * v["b"])
        steps.append(
            ("run_command", {"command": f'python3 -c "print({v["a"]} * {v["b"]})"'}, _shell(out))
        )
    elif kind == "sort":
        nums = [rng.randint(-50, 500) for _ in range(rng.randint(5, 9))]
        v["nums"] = ", ".join(map(str, nums))
        out = str(sorted(nums))
        command = f'python3 -c "print(sorted([{v["nums"]}]))"'
        steps.append(("run_command", {"command": command}, _shell(out)))
    elif kind == "sha256":
        v["word"] = f"{rng.choice(common['words'])}-{rng.randint(1, 9999)}"
        out = hashlib.sha256(v["word"].encode()).hexdigest()
        command = (
            f"python3 -c \"import hashlib; print(hashlib.sha256(b'{v['word']}').hexdigest())\""
        )
        steps.append(("run_command", {"command": command}, _shell(out)))
    elif kind == "script":
        name = rng.choice(sorted(_SCRIPTS))
        code_t, compute = _SCRIPTS[name]
        n = rng.randint(8, 30)
        v["path"] = f"{HOME}/{name}_{k}{rng.randint(10, 999)}.py"
        for lg in LANGS:
            v[f"what_{lg}"] = lang_bank(lg)["script_what"][name].format(n=n)
        out = compute(n)
        written = f"File written: {v['path']}"
        steps.append(("write_file", {"path": v["path"], "content": code_t.format(n=n)}, written))
        steps.append(("run_command", {"command": f"python3 {v['path']}"}, _shell(out)))
    elif kind == "note":
        v["path"] = f"{HOME}/note_{k}{rng.randint(10, 999)}.txt"
        v["note"] = "\n".join(rng.sample(lang_bank(lang)["notes"], rng.randint(2, 4))) + "\n"
        out = v["note"]
        written = f"File written: {v['path']}"
        steps.append(("write_file", {"path": v["path"], "content": v["note"]}, written))
        steps.append(("read_file", {"path": v["path"]}, out))
    elif kind == "wc":
        items = rng.sample(common["items"], rng.randint(3, 8))
        path = f"{HOME}/items_{k}{rng.randint(10, 999)}.txt"
        v.update(path=path, n=len(items), items=", ".join(items))
        out = f"{len(items)} {v['path']}"
        written = f"File written: {v['path']}"
        steps.append(
            ("write_file", {"path": v["path"], "content": "\n".join(items) + "\n"}, written)
        )
        steps.append(("run_command", {"command": f"wc -l {v['path']}"}, _shell(out)))
    else:  # json_port
        v.update(
            path=f"{HOME}/{rng.choice(common['services'])}_{k}.json",
            name=rng.choice(common["services"]),
            port=rng.randint(1024, 65000),
        )
        config = {"name": v["name"], "port": v["port"], "debug": False}
        content = json.dumps(config, indent=2) + "\n"
        out = str(v["port"])
        written = f"File written: {v['path']}"
        steps.append(("write_file", {"path": v["path"], "content": content}, written))
        command = f"python3 -c \"import json; print(json.load(open('{v['path']}'))['port'])\""
        steps.append(("run_command", {"command": command}, _shell(out)))
    v["out"] = out.rstrip("\n")
    bank = lang_bank(lang)
    ask = rng.choice(bank["ask"][kind]).format(**v)
    answer = bank["answer"][kind].format(**v)
    return ask, steps, answer


def _agent_row(rng: random.Random, lang: str, target_bytes: int) -> list[dict[str, Any]]:
    """A tool-using conversation of up to six rounds, grown towards ``target_bytes``."""
    bank = lang_bank(lang)
    b = _Builder(rng, lang)
    b.messages.append({"role": "system", "content": rng.choice(bank["system"])})
    style = rng.choice(("inline", "field", "inline", "none"))
    rounds = 0
    while rounds < 6:
        mark = len(b.messages)
        ask, steps, answer = _task(rng, lang, rng.choice(_TASKS), len(b.messages))
        if rounds:
            ask = _follow_up(lang, ask)
        b.messages.append({"role": "user", "content": ask})
        for i, (tool, args, output) in enumerate(steps):
            reasoning = b.think() if style != "none" and (i == 0 or rng.random() < 0.3) else ""
            intro = rng.choice(bank["step_intro"])
            b.tool_step(tool, args, output, intro, reasoning, style)
        closing = b.fillers(rng.randint(1, 2))
        b.assistant(answer + "\n\n" + _sep(lang).join(closing))
        rounds += 1
        size = _size(b.messages)
        if rounds > 1 and size > target_bytes * 1.05:
            del b.messages[mark:]  # this round overshoots: stop with the previous one
            break
        if size + 600 > target_bytes:
            break
    _pad_last_answer(b, target_bytes)
    return b.messages


def _qa_row(rng: random.Random, lang: str, target_bytes: int) -> list[dict[str, Any]]:
    """A conversation without tools: one question per round, topics in a random order."""
    bank = lang_bank(lang)
    b = _Builder(rng, lang)
    style = rng.choice(("inline", "field", "none"))
    ticket = rng.randint(1000, 99999)
    for i, qa in enumerate(rng.sample(bank["qa"], len(bank["qa"]))):
        question, sentences = qa["question"], qa["sentences"]
        if i == 0:
            question += bank["ticket"]["question_suffix"].format(n=ticket)
        else:
            question = _follow_up(lang, question)
        b.messages.append({"role": "user", "content": question})
        reasoning = b.think(3) if style != "none" and i == 0 else ""
        answer = _sep(lang).join(rng.sample(sentences, rng.randint(3, len(sentences))))
        opener = bank["ticket"]["answer_opener"].format(n=ticket) if i == 0 else ""
        b.assistant(opener + answer, reasoning, think_style=style)
        if not target_bytes or _size(b.messages) + 400 > target_bytes:
            break
    _pad_last_answer(b, target_bytes)
    return b.messages


def _pad_last_answer(b: _Builder, target_bytes: int) -> None:
    """Append unused filler sentences to the final answer until the row reaches the target."""
    if not target_bytes:
        return
    last = b.messages[-1]
    pool = lang_bank(b.lang)["filler"]
    extra = [s for s in b.rng.sample(pool, len(pool)) if s not in last["content"]]
    while extra and _size(b.messages) < target_bytes:
        last["content"] += _sep(b.lang) + extra.pop()


def _size(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages, ensure_ascii=False).encode())
