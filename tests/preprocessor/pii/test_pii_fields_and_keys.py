"""``PIIPresidioFilter`` on what is not message text: keys (an e-mail as a metadata or tool
argument key), long numbers (a card stored as a number), a message's ``name``, the ``tools``
schema, a URL's password, and a Chinese name inside English text. Real Presidio, spaCy, jieba.
"""

from __future__ import annotations

import json

import pytest

from twinkle.preprocessor.pii_presidio_filter import PIIPresidioFilter

CARD = 5555555555554444  # a valid card number, stored as a number


@pytest.fixture(scope="module")
def rewritten() -> tuple[dict, str]:
    args = {"command": "psql postgres://pguser:S3cretPgPw9@db:5432/x", "env": {"v.k@ex.com": "1"}}
    row = {
        "id": "r1",
        "frank.top@example.com": "v",
        "metadata": {"seen": {"judy.key@example.com": 1, "plain": 2}, "n": 12, "ok": True},
        "card_number": CARD,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "run_command",
                    "description": "Run a shell command. Owner: oscar.tools@example.com",
                    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
                },
            }
        ],
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {
                "role": "user",
                "name": "frank.name@example.com",
                "content": "The database is at postgres://pguser:S3cretPgPw9@db:5432/x. "
                "Regards, Logan Harris. 联系人：王小明。",
            },
            {
                "role": "assistant",
                "content": "On it.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "run_command", "arguments": json.dumps(args)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "run_command", "content": "done"},
            {"role": "assistant", "content": "Done."},
        ],
    }
    kept, dropped = PIIPresidioFilter(all_fields=True, seed=3)([row])
    assert dropped == []
    return kept[0], json.dumps(kept[0], ensure_ascii=False)


@pytest.mark.parametrize(
    "planted",
    [
        "frank.top@example.com",  # a top-level key
        "judy.key@example.com",  # a nested key
        str(CARD),  # a number
        "oscar.tools@example.com",  # the tools schema
        "frank.name@example.com",  # a message's name
        "S3cretPgPw9",  # a URL's password, in prose and in a command
        "王小明",  # a Chinese name in English text
        "v.k@ex.com",  # a key inside tool-call arguments
        "Logan Harris",
    ],
)
def test_nothing_planted_is_left(rewritten, planted):
    assert planted not in rewritten[1]


def test_what_is_no_identifier_stays_as_it_was(rewritten):
    row, _ = rewritten
    keys = list(row)  # the rewritten key keeps its place
    assert keys[0] == "id" and keys[2:] == ["metadata", "card_number", "tools", "messages"]
    assert keys[1] != "frank.top@example.com" and "@" in keys[1] and row[keys[1]] == "v"
    assert row["metadata"]["n"] == 12 and row["metadata"]["ok"] is True
    assert row["metadata"]["seen"]["plain"] == 2 and len(row["metadata"]["seen"]) == 2
    assert isinstance(row["card_number"], str) and set(row["card_number"]) == {"*"}
    function = row["tools"][0]["function"]
    assert function["name"] == "run_command" and function["parameters"]["properties"]
    assert function["description"].startswith("Run a shell command. Owner: ")
    tool = row["messages"][3]
    assert tool["name"] == "run_command"
    assert "postgres://pguser:" in row["messages"][1]["content"]
    assert "联系人：" in row["messages"][1]["content"]
    args = json.loads(row["messages"][2]["tool_calls"][0]["function"]["arguments"])
    assert args["command"].startswith("psql postgres://pguser:") and "@db:5432/x" in args["command"]
    assert list(args["env"].values()) == ["1"]


def test_keys_that_meet_after_the_rewrite_keep_both_values():
    from twinkle.preprocessor.pii.rewrite import rewrite_keys

    out = rewrite_keys({"a@x.io": 1, "b@x.io": 2, "c": 3}, lambda k: "m@x.io" if "@" in k else k)
    assert out == {"m@x.io": 1, "m@x.io#2": 2, "c": 3}
