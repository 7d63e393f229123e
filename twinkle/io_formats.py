"""Conversation formats of public datasets, converted to OpenAI ``messages`` rows on reading.

``twinkle.io.read_rows`` calls ``convert_rows`` on every file it reads, so ``twinkle curate``,
``twinkle run --input`` and the flows see one shape whatever the dataset uses:

- **openai**: ``messages`` with string content or content parts; passed through untouched.
- **sharegpt**: ``conversations`` of ``{from, value}`` (``human``/``user``, ``gpt``/
  ``assistant``, ``system``, ``function_call``, ``observation``), an optional top-level
  ``system`` and ``tools`` (a list or its JSON text, as LLaMA-Factory and the glaive
  function-calling sets ship it). A ``function_call`` turn becomes an assistant message with
  OpenAI ``tool_calls`` (ids ``call_1``, ``call_2``, ... per row); each ``observation`` becomes
  a ``tool`` message whose ``tool_call_id`` is the id of the call it answers, in order.
- **alpaca**: ``instruction``, ``input``, ``output`` with optional ``system`` and ``history``
  (``[[query, answer], ...]``); the user turn is the instruction, a blank line, the input.
- **glaive**: the raw glaive-function-calling shape, ``system`` (a preamble, then the
  function schemas as JSON objects) and ``chat`` (``USER:`` / ``ASSISTANT:`` /
  ``FUNCTION RESPONSE:`` turns, ``<functioncall> {...}`` calls, ``<|endoftext|>`` ends). The
  schemas become OpenAI ``tools``, calls and responses ``tool_calls`` and ``tool`` messages.

Every other field of a row is kept. The format is detected per row (so a file of one format
reads at full speed and a mixed file still reads); ``format=`` forces one. With
``format='auto'`` a row in no known format raises ``DatasetFormatError`` naming the file and
the row; with the default ``format=None`` such rows pass through unchanged (task files,
work files of the flows), and the filters drop what is not a conversation.

``expand_sources`` turns the inputs into sources: files, folders (the data files directly
inside), globs, and Hugging Face ``save_to_disk`` folders; ``dataset_rows`` reads a
``datasets.Dataset``/``DatasetDict`` object.

Example:
    >>> row = {'id': 7, 'instruction': 'Add 2 and 3.', 'input': '', 'output': '5'}
    >>> out = convert_row(row, 'auto')
    >>> out['id'], [m['role'] for m in out['messages']], out['messages'][1]['content']
    (7, ['user', 'assistant'], '5')
    >>> turns = [{'from': 'human', 'value': 'Hi'}, {'from': 'gpt', 'value': 'Hello'}]
    >>> convert_row({'conversations': turns}, 'auto')['messages'][1]
    {'role': 'assistant', 'content': 'Hello'}
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from twinkle.errors import TwinkleError

__all__ = [
    "FORMATS",
    "RowFormatError",
    "convert_row",
    "convert_rows",
    "dataset_rows",
    "detect_format",
    "expand_sources",
    "is_dataset_folder",
]

#: Accepted values of ``format=`` / ``--format`` ('auto' detects per row and insists).
FORMATS = ("auto", "openai", "sharegpt", "alpaca", "glaive")
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_GLOB_CHARS = frozenset("*?[")

_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "system": "system",
    "function_call": "function_call",
    "observation": "tool",
    "tool": "tool",
    "function": "tool",
    "ipython": "tool",
}


class RowFormatError(TwinkleError, ValueError):
    """One row does not fit the format it was read as (``twinkle.io`` adds file and row)."""


def detect_format(row: Any) -> str | None:
    """The format of one row, or None when it is in no known format.

    Example:
        >>> detect_format({'messages': []}), detect_format({'question': 'q'})
        ('openai', None)
    """
    if not isinstance(row, dict):
        return None
    messages = row.get("messages")
    if messages is not None or "messages" in row:
        if isinstance(messages, list) and messages and _sharegpt_turn(messages[0]):
            return "sharegpt"  # ShareGPT turns stored under "messages"
        return "openai"
    if isinstance(row.get("conversations"), list):
        return "sharegpt"
    if "instruction" in row and "output" in row:
        return "alpaca"
    if isinstance(row.get("chat"), str) and "USER:" in row["chat"]:
        return "glaive"
    return None


def _sharegpt_turn(turn: Any) -> bool:
    return isinstance(turn, dict) and "from" in turn and "value" in turn and "role" not in turn


def convert_row(row: Any, fmt: str | None = None) -> Any:
    """``row`` as an OpenAI ``messages`` row (see the module doc for ``fmt``).

    Raises ``RowFormatError`` when the row does not fit the format it is read as.
    """
    kind = detect_format(row) if fmt in (None, "auto") else fmt
    if kind is None:
        if fmt is None:
            return row
        keys = ", ".join(sorted(map(str, row))[:8]) if isinstance(row, dict) else ""
        raise RowFormatError(
            f"no known conversation format (a {type(row).__name__}"
            + (f" with keys {keys}" if keys else "")
            + "); expected OpenAI 'messages', ShareGPT 'conversations' or Alpaca "
            "'instruction'/'output', or pass --format"
        )
    if not isinstance(row, dict):
        raise RowFormatError(f"expected a JSON object, got {type(row).__name__}")
    if kind == "openai":
        return _openai(row)
    if kind == "sharegpt":
        return _sharegpt(row)
    if kind == "alpaca":
        return _alpaca(row)
    if kind == "glaive":
        return _glaive(row)
    raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def check_format(fmt: str | None) -> str | None:
    """``fmt`` checked (None, or one of ``FORMATS``); ValueError lists the valid ones."""
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    return fmt


def convert_rows(rows: Iterable[Any], fmt: str | None = None) -> Iterator[Any]:
    """Convert each row; a failure raises ``RowFormatError`` carrying ``row`` (1-based)."""
    for index, row in enumerate(rows, 1):
        if fmt is None and isinstance(row, dict) and isinstance(row.get("messages"), list):
            messages = row["messages"]
            if not messages or not _sharegpt_turn(messages[0]):
                yield row  # the common case: already OpenAI rows
                continue
        try:
            yield convert_row(row, fmt)
        except RowFormatError as exc:
            exc.row = index  # type: ignore[attr-defined]
            raise


def _openai(row: dict[str, Any]) -> dict[str, Any]:
    messages = row.get("messages")
    if isinstance(messages, list) and messages and _sharegpt_turn(messages[0]):
        return _sharegpt(row, key="messages")
    if "messages" not in row:
        raise RowFormatError("no 'messages' field; this row is not in OpenAI format")
    return row  # malformed messages reach the filters, which drop them with a reason


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    raise RowFormatError(f"{what} must be text, got {type(value).__name__}")


def _json_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _openai_tools(tools: Any) -> Any:
    """``tools`` as an OpenAI list of ``{type: function, function: {...}}`` (else unchanged)."""
    parsed = _json_value(tools)
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list) or not all(isinstance(t, dict) for t in parsed):
        return tools
    return [
        t
        if t.get("type") == "function" and isinstance(t.get("function"), dict)
        else {"type": "function", "function": t}
        for t in parsed
    ]


def _calls(value: Any, counter: list[int]) -> list[dict[str, Any]]:
    parsed = _json_value(value)
    items = parsed if isinstance(parsed, list) else [parsed]
    calls = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("function"), dict):
            item = item["function"]
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise RowFormatError(
                f"function_call value {str(value)[:80]!r} is not a JSON object with a 'name'"
            )
        args = item.get("arguments", item.get("parameters", {}))
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        counter[0] += 1
        calls.append(
            {
                "id": f"call_{counter[0]}",
                "type": "function",
                "function": {"name": item["name"], "arguments": args},
            }
        )
    return calls


def _sharegpt(row: dict[str, Any], key: str = "") -> dict[str, Any]:
    key = key or ("conversations" if "conversations" in row else "messages")
    turns = row.get(key)
    if not isinstance(turns, list):
        raise RowFormatError(f"'{key}' must be a list of {{from, value}} turns")
    out = {k: v for k, v in row.items() if k not in (key, "system")}
    messages: list[dict[str, Any]] = []
    system = row.get("system")
    if isinstance(system, str) and system.strip():
        messages.append({"role": "system", "content": system})
    counter = [0]
    pending: list[str] = []  # ids of calls not yet answered, in order
    last_id = ""
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RowFormatError(f"turn {i} is a {type(turn).__name__}, not a {{from, value}}")
        who = turn.get("from", turn.get("role"))
        role = _SHAREGPT_ROLES.get(str(who).lower()) if who is not None else None
        if role is None:
            raise RowFormatError(
                f"turn {i} has from={who!r}; expected one of {', '.join(_SHAREGPT_ROLES)}"
            )
        value = turn.get("value", turn.get("content"))
        extra = {k: v for k, v in turn.items() if k not in ("from", "value", "role", "content")}
        if role == "function_call":
            calls = _calls(value, counter)
            pending.extend(c["id"] for c in calls)
            messages.append({**extra, "role": "assistant", "content": "", "tool_calls": calls})
            continue
        text = _text(value, f"turn {i} value")
        if role == "tool":
            if pending:
                call_id = pending.pop(0)
            elif last_id:  # more results than calls: they answer the last call
                call_id = last_id
            else:  # a result with no call before it: an id of its own
                counter[0] += 1
                call_id = f"call_{counter[0]}"
            last_id = call_id
            messages.append({**extra, "role": "tool", "content": text, "tool_call_id": call_id})
            continue
        messages.append({**extra, "role": role, "content": text})
    out["messages"] = messages
    if "tools" in out:
        out["tools"] = _openai_tools(out["tools"])
    return out


def _alpaca(row: dict[str, Any]) -> dict[str, Any]:
    if "instruction" not in row or "output" not in row:
        raise RowFormatError("an Alpaca row needs 'instruction' and 'output'")
    instruction = _text(row.get("instruction"), "instruction").strip()
    extra_input = _text(row.get("input"), "input").strip()
    output = row.get("output")
    if isinstance(output, list) and output and all(isinstance(o, str) for o in output):
        output = output[0]  # ranking sets list the preferred answer first
    messages: list[dict[str, Any]] = []
    system = _text(row.get("system"), "system")
    if system.strip():
        messages.append({"role": "system", "content": system})
    history = row.get("history") or []
    if not isinstance(history, list):
        raise RowFormatError("'history' must be a list of [query, answer] pairs")
    for i, pair in enumerate(history):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise RowFormatError(f"history item {i} is not a [query, answer] pair")
        messages.append({"role": "user", "content": _text(pair[0], f"history {i} query")})
        messages.append({"role": "assistant", "content": _text(pair[1], f"history {i} answer")})
    user = (
        f"{instruction}\n\n{extra_input}"
        if instruction and extra_input
        else (instruction or extra_input)
    )
    messages.append({"role": "user", "content": user})
    messages.append({"role": "assistant", "content": _text(output, "output")})
    out = {
        k: v
        for k, v in row.items()
        if k not in ("instruction", "input", "output", "system", "history")
    }
    out["messages"] = messages
    return out


_GLAIVE_TURN_RE = re.compile(r"(?:^|\n)\s*(USER|ASSISTANT|FUNCTION RESPONSE):\s?")
_GLAIVE_ARGS_RE = re.compile(r"""("arguments"\s*:\s*)'(.*)'(\s*}\s*)$""", re.DOTALL)


def _json_objects(text: str) -> list[Any]:
    """Every top-level JSON object in ``text``, in order (the glaive system prompt's schemas)."""
    decoder, out, i = json.JSONDecoder(), [], text.find("{")
    while i != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        out.append(value)
        i = text.find("{", end)
    return out


def _glaive_call(text: str, counter: list[int]) -> list[dict[str, Any]]:
    body = text.split("<functioncall>", 1)[1].strip()
    body = _GLAIVE_ARGS_RE.sub(lambda m: m.group(1) + json.dumps(m.group(2)) + m.group(3), body)
    return _calls(body, counter)


def _glaive(row: dict[str, Any]) -> dict[str, Any]:
    chat = row.get("chat")
    if not isinstance(chat, str):
        raise RowFormatError("a glaive row needs a 'chat' string")
    system = _text(row.get("system"), "system").strip()
    if system.startswith("SYSTEM:"):
        system = system[len("SYSTEM:") :].strip()
    brace = system.find("{")
    preamble = (system[:brace] if brace != -1 else system).strip().rstrip("-").strip()
    tools = [t for t in _json_objects(system[brace:]) if isinstance(t, dict)] if brace != -1 else []
    messages: list[dict[str, Any]] = []
    if preamble:
        messages.append({"role": "system", "content": preamble})
    counter, pending, last_id = [0], [], ""
    parts = _GLAIVE_TURN_RE.split(chat)
    for who, text in zip(parts[1::2], parts[2::2]):
        text = text.replace("<|endoftext|>", "").strip()
        if who == "USER":
            messages.append({"role": "user", "content": text})
        elif who == "FUNCTION RESPONSE":
            call_id = pending.pop(0) if pending else last_id or "call_0"
            last_id = call_id
            messages.append({"role": "tool", "content": text, "tool_call_id": call_id})
        elif "<functioncall>" in text:
            calls = _glaive_call(text, counter)
            pending.extend(c["id"] for c in calls)
            before = text.split("<functioncall>", 1)[0].strip()
            messages.append({"role": "assistant", "content": before, "tool_calls": calls})
        else:
            messages.append({"role": "assistant", "content": text})
    if not any(m["role"] == "user" for m in messages):
        raise RowFormatError("the 'chat' string has no 'USER:' turn")
    out = {k: v for k, v in row.items() if k not in ("system", "chat")}
    out["messages"] = messages
    if tools:
        out["tools"] = _openai_tools(tools)
    return out


def is_dataset_folder(path: Path) -> bool:
    """Whether ``path`` is a Hugging Face ``save_to_disk`` folder (Dataset or DatasetDict)."""
    return path.is_dir() and (
        (path / "dataset_dict.json").is_file()
        or ((path / "state.json").is_file() and (path / "dataset_info.json").is_file())
    )


def expand_sources(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files and ``save_to_disk`` folders to read, in order.

    A folder stands for the data files directly inside it (hidden files and sub-folders are
    not read) unless it is a ``save_to_disk`` folder; a pattern with ``*``, ``?`` or ``[``
    that names no existing path is expanded as a glob (sorted). Raises FileNotFoundError
    for a missing path or a glob that matches nothing, and ValueError for a folder without
    data files.
    """
    out: list[Path] = []
    for item in paths:
        path = Path(item)
        if not path.exists() and _GLOB_CHARS & set(str(item)):
            matches = sorted(glob.glob(str(item), recursive=True))
            if not matches:
                raise FileNotFoundError(f"{item}: the pattern matches no file")
            out.extend(expand_sources(matches))
            continue
        if path.is_dir() and not is_dataset_folder(path):
            found = sorted(
                p
                for p in path.iterdir()
                if (p.is_file() and p.suffix.lower() in _DATA_SUFFIXES or is_dataset_folder(p))
                and not p.name.startswith(".")
            )
            if not found:
                raise ValueError(
                    f"{path} holds no {', '.join(_DATA_SUFFIXES)} files and is not a "
                    "datasets save_to_disk folder; pass data files or such a folder"
                )
            out.extend(found)
            continue
        out.append(path)
    return out


def dataset_rows(dataset: Any) -> Iterator[dict[str, Any]]:
    """Rows of a ``datasets`` Dataset, IterableDataset or DatasetDict (splits in order)."""
    if hasattr(dataset, "keys") and hasattr(dataset, "values") and not hasattr(dataset, "features"):
        for split in dataset.values():
            yield from dataset_rows(split)
        return
    yield from iter(dataset)


def load_dataset_folder(path: Path) -> Any:
    """A ``save_to_disk`` folder loaded with ``datasets.load_from_disk`` (the hf extra)."""
    try:
        from datasets import load_from_disk
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            f"{path} is a Hugging Face datasets folder; install the hf extra "
            "(pip install 'twinkle[hf]') to read it"
        ) from exc
    return load_from_disk(str(path))


def is_dataset_object(obj: Any) -> bool:
    """Whether ``obj`` is a ``datasets`` Dataset/DatasetDict/IterableDataset (no import)."""
    return type(obj).__module__.startswith("datasets.")
