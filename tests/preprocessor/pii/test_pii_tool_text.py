"""PIIPresidioFilter on agent rows: commands, code, paths and JSON in tool calls and tool
outputs survive; names in prose are pseudonymised consistently; the bundled conversations
still replay in a real shell after the rewrite."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from twinkle.data_format import normalize_tool_calls
from twinkle.envs.base import format_command_output
from twinkle.preprocessor.pii_presidio_filter import (
    PIIPresidioFilter,
    _is_name_like,
    _is_phone_like,
    _looks_like_prose,
)
from twinkle.synthetic import HOME

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "conversations.jsonl"


@pytest.fixture(scope="module")
def pii() -> PIIPresidioFilter:
    return PIIPresidioFilter(seed=11)


@pytest.fixture(scope="module")
def bundled(pii) -> tuple[list[dict], list[dict], list[dict]]:
    rows = [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    kept, dropped = pii(rows)
    return rows, kept, dropped


def call(cid: str, name: str, **args: str) -> dict:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def tool(cid: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def arguments(msg: dict) -> list[dict]:
    return [json.loads(c["function"]["arguments"]) for c in msg["tool_calls"]]


# -- the shape tests ---------------------------------------------------------------------------


def test_prose_test_tells_notes_from_code():
    assert _looks_like_prose("Ask Dana about the staging credentials rotation.\nBuy filters.\n")
    assert _looks_like_prose("Maria Garcia") and _looks_like_prose("Berlin")
    assert _looks_like_prose("夜间备份完成后再部署解析器修复。")
    for code in (
        'python3 -c "print(743 * 781)"',
        "def is_prime(p):\n    return p > 1 and all(p % d for d in range(2, p))\n",
        "/home/user/note_1418.txt",
        '{\n  "name": "scorer",\n  "port": 37651\n}\n',
        "391\n",
        "python3",
    ):
        assert not _looks_like_prose(code), code


@pytest.mark.parametrize(
    ("text", "span", "entity", "ok"),
    [
        ("Ask Dana about it", "Dana", "PERSON", True),
        ("Dana will call.", "Dana", "PERSON", True),  # a known first name may open a sentence
        ("I met Maria Garcia.", "Maria Garcia", "PERSON", True),
        ("Benchmark the dedup step", "Benchmark", "PERSON", False),  # a verb opening a line
        ("run python3 now", "python3", "PERSON", False),
        ("for i in range(1, 13 + 1)", "range(1", "LOCATION", False),
        ("open config_123.json", "config_123.json", "PERSON", False),
        ("checked with Python here", "Python", "ORGANIZATION", False),
        ("users' SSH keys", "SSH", "ORGANIZATION", False),
        ("问一下小王测试", "小王", "PERSON", True),
    ],
)
def test_only_name_shaped_spans_count_as_names(text, span, entity, ok):
    start = text.index(span)
    assert _is_name_like(text, start, start + len(span), entity) is ok


def test_phone_shape():
    assert not _is_phone_like("1695", prose=True)  # phonenumbers takes it for a short number
    assert _is_phone_like("2125550187", prose=True)
    assert not _is_phone_like("2125550187", prose=False)  # in code: just a number
    assert _is_phone_like("+1 212-555-0187", prose=False)


# -- rows --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_commands_code_and_paths_are_never_rewritten_by_ner(pii):
    script = "for i in range(1, 13 + 1):\n    print(i * i)\n"
    calls = [
        call("c1", "run_command", command='python3 -c "print(743 * 781)"'),
        call("c2", "write_file", path="/home/user/config_123.json", content=script),
        call("c3", "run_command", command="python3 /home/user/config_123.json | wc -l"),
        call("c4", "read_file", path="/home/user/note_1418.txt"),
    ]
    row = {
        "messages": [
            {"role": "system", "content": "You work in a Linux sandbox with python3 installed."},
            {"role": "user", "content": "Run Python on note_1418.txt, port 37651, please."},
            {"role": "assistant", "content": "", "tool_calls": calls},
            tool("c1", "580283\n"),
            tool("c2", "File written: /home/user/config_123.json"),
            tool("c3", "13\n"),
            tool("c4", "Benchmark the dedup step on the 1M-row sample.\n"),
        ]
    }
    kept, dropped = pii([row])
    assert dropped == [] and kept[0] == row  # nothing in it is personal data


@pytest.mark.slow
def test_prose_values_in_tool_calls_are_pseudonymised_like_the_conversation(pii):
    note = "Ask Maria Garcia about the staging credentials rotation.\n"
    row = {
        "messages": [
            {"role": "user", "content": f"Save this to /home/user/note_7.txt:\n{note}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    call("c1", "write_file", path="/home/user/note_7.txt", content=note),
                    call("c2", "read_file", path="/home/user/note_7.txt"),
                ],
            },
            tool("c1", "File written: /home/user/note_7.txt"),
            tool("c2", note),
            {"role": "assistant", "content": "Saved; Maria Garcia will get the note."},
        ]
    }
    msgs = pii([row])[0][0]["messages"]
    written, read = arguments(msgs[1])
    assert written["path"] == read["path"] == "/home/user/note_7.txt"
    assert "Maria Garcia" not in json.dumps(msgs)
    person = written["content"].removeprefix("Ask ").split(" about ")[0]
    assert written["content"] == note.replace("Maria Garcia", person)
    assert msgs[3]["content"] == written["content"]  # the read-back matches a replay
    assert msgs[0]["content"].endswith(written["content"])
    assert msgs[4]["content"] == f"Saved; {person} will get the note."


@pytest.mark.slow
def test_a_name_that_a_command_holds_stays_so_the_output_still_matches(pii):
    row = {
        "messages": [
            {"role": "user", "content": "Greet Maria Garcia from the shell."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("c1", "run_command", command="echo 'Hello Maria Garcia'")],
            },
            tool("c1", "Hello Maria Garcia\n"),
        ]
    }
    kept, _ = pii([row])
    assert kept[0] == row  # the command keeps the name, so hiding it elsewhere hides nothing


@pytest.mark.slow
def test_strong_identifiers_are_rewritten_in_commands_and_outputs_alike(pii):
    email = "maria.garcia@example.com"
    row = {
        "messages": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    call("c1", "run_command", command=f"echo {email} +1 212-555-0187 2125550187")
                ],
            },
            tool("c1", f"{email} +1 212-555-0187 2125550187\n"),
        ]
    }
    msgs = pii([row])[0][0]["messages"]
    command = arguments(msgs[0])[0]["command"]
    assert email not in command and "212-555" not in command
    assert command.endswith(" 2125550187")  # a bare digit run in code is a number
    assert msgs[1]["content"] == command.removeprefix("echo ") + "\n"


@pytest.mark.slow
def test_json_file_and_its_read_back_keep_their_bytes(pii):
    text = '{\n  "owner":   "maria.garcia@example.com",\n  "port": 37651\n}\n'
    row = {
        "messages": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    call("c1", "write_file", path="/home/user/cfg_1.json", content=text),
                    call("c2", "read_file", path="/home/user/cfg_1.json"),
                ],
            },
            tool("c1", "File written: /home/user/cfg_1.json"),
            tool("c2", text),
        ]
    }
    msgs = pii([row])[0][0]["messages"]
    written = arguments(msgs[0])[0]["content"]
    assert msgs[2]["content"] == written  # byte-identical, spacing and all
    assert written.startswith('{\n  "owner":   "') and written.endswith('",\n  "port": 37651\n}\n')
    assert "maria.garcia" not in written and "@" in written


@pytest.mark.slow
def test_weak_recognizers_are_off_by_default_and_prose_only_when_asked(pii):
    text = "account 123456789012, licence A1234567, file note_1418.txt, port 37651, 1695 rows"
    assert (
        pii([{"messages": [{"role": "user", "content": text}]}])[0][0]["messages"][0]["content"]
        == text
    )
    opted = PIIPresidioFilter(
        languages=["en"], entity_strategy={"UK_NHS": "mask"}, record_counts=True
    )
    row = {
        "messages": [
            {"role": "user", "content": "My NHS number is 9434765919."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("c1", "run_command", command="echo 9434765919")],
            },
        ]
    }
    msgs = opted([row])[0][0]["messages"]
    assert msgs[0]["content"] == "My NHS number is **********."
    assert opted([row])[0][0]["_pii_hits"] == {"UK_NHS": 1}
    assert arguments(msgs[1])[0]["command"] == "echo 9434765919"


@pytest.mark.slow
def test_japanese_and_korean_text_is_not_read_by_english_or_chinese_ner(pii):
    texts = [
        "당신은 python3가 설치된 Linux 샌드박스에서 작업을 수행하는 에이전트입니다.",
        "夜間バックアップが終わってからパーサーの修正をデプロイ。\n木曜の朝会は10時半に変更。\n",
    ]
    rows = [{"messages": [{"role": "user", "content": t}]} for t in texts]
    assert pii(rows)[0] == rows
    mail = {"messages": [{"role": "user", "content": "메일은 kim@example.kr 입니다"}]}
    assert "kim@example.kr" not in pii([mail])[0][0]["messages"][0]["content"]


# -- the bundled conversations -----------------------------------------------------------------


def _commands(row: dict) -> list[str]:
    return [
        json.loads(c["function"]["arguments"])["command"]
        for m in row["messages"]
        for c in normalize_tool_calls(m) or ()
        if c["function"]["name"] == "run_command"
    ]


@pytest.mark.slow
def test_bundled_rows_keep_count_and_every_command(bundled):
    rows, kept, dropped = bundled
    assert dropped == [] and len(kept) == len(rows) == 40
    commands = [_commands(r) for r in rows]
    assert sum(map(len, commands)) > 10
    assert [_commands(r) for r in kept] == commands


@pytest.mark.slow
def test_bundled_rows_still_replay_after_the_rewrite(bundled, tmp_path):
    """Run every tool call of every rewritten row in a real shell: the rewritten tool outputs
    must come back exactly. A file a row reads but never writes (a task file the sandbox
    ships) is seeded with the ORIGINAL content, as the sandbox holds it."""
    rows, kept, _ = bundled
    checked = 0
    for n, (before, row) in enumerate(zip(rows, kept)):
        home = tmp_path / str(n)
        home.mkdir()
        originals = {
            m["tool_call_id"]: m["content"] for m in before["messages"] if m["role"] == "tool"
        }
        results = {m["tool_call_id"]: m["content"] for m in row["messages"] if m["role"] == "tool"}
        for msg in row["messages"]:
            for c in normalize_tool_calls(msg) or ():
                fn = c["function"]
                args = {
                    k: v.replace(HOME, str(home)) for k, v in json.loads(fn["arguments"]).items()
                }
                expected = results[c["id"]].replace(HOME, str(home))
                if fn["name"] == "write_file":
                    Path(args["path"]).write_text(args["content"], encoding="utf-8")
                    got = f"File written: {args['path']}"
                elif fn["name"] == "read_file":
                    path = Path(args["path"])
                    if not path.exists():
                        path.write_text(originals[c["id"]], encoding="utf-8")
                    got = path.read_text(encoding="utf-8")
                else:
                    assert fn["name"] == "run_command"
                    proc = subprocess.run(
                        ["bash", "-c", args["command"]],
                        check=False,
                        capture_output=True,
                        text=True,
                        cwd=home,
                        timeout=30,
                        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                    )
                    got = format_command_output(proc.stdout, proc.stderr, proc.returncode)
                assert got == expected, (row["id"], fn)
                checked += 1
    assert checked >= 40


@pytest.mark.slow
def test_bundled_note_names_are_still_pseudonymised(bundled):
    rows, kept, _ = bundled
    before = next(r for r in rows if "Ask Dana about" in json.dumps(r))
    after = next(r for r in kept if r["id"] == before["id"])
    assert "Dana" not in json.dumps(after)
    notes = [
        a["content"]
        for m in after["messages"]
        if m.get("tool_calls")
        for a in arguments(m)
        if "content" in a
    ]
    outputs = [m["content"] for m in after["messages"] if m["role"] == "tool"]
    assert notes and all(n in outputs for n in notes)  # the read-back shows the same pseudonym
    assert "\nBenchmark the dedup step" in notes[0]  # a verb is not a name
