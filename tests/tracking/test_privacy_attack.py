"""Harder attacks on "nothing private leaves curation": secrets and personal data planted where
tests/tracking/test_privacy.py does not put them (tool-call arguments, tool outputs, a
message's ``name``, the system prompt, reasoning, nested metadata, dict keys, numbers, the
``tools`` schema, rows that curation drops) and in shapes Presidio or the scrubber may miss
(AWS, GitHub, JWT, PEM, connection-string passwords, ``sk-proj-`` keys, cards, IBANs, a German
phone, French/German/Chinese names). One pipeline run; every planted string is then searched
for, byte by byte (raw UTF-8 and JSON-escaped), in the MLflow database, its artifact folder
and the Prefect database. The run's local output folder is only reported, not asserted on:
it is the user's own data."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.flows.conftest import conversation
from tests.flows.tests_flows_helpers import flow_state, prefect_db_files
from tests.tracking.privacy_run import run_planted

pytestmark = pytest.mark.slow

# -- what is planted, and where (label -> the string that must not be stored) ---------------
AWS_KEY = "AKIAZ7Q3WJ5K2M8N4P6R"
GITHUB_TOKEN = "ghp_Q7w2E9r4T6y8U1i3O5p7A9s2D4f6G8h0J2k4"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiJwbGFudGVkLXVzZXItNDIiLCJuYW1lIjoiWmVkIn0"
    ".Qx7Yv2Lm9Np4Rt6Ws8Ab3Cd5Ef7Gh9Ij"
)
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCplantedKeyBody"
PEM = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----"
PG_PASSWORD = "S3cretPgPw9"
PG_URL = f"postgres://pguser:{PG_PASSWORD}@db:5432/x"
OPENAI_KEY = "sk-proj-Tq8Wm3Zr5Yx7Vn2Bk4Lp6Hs9Jd1Fg"
CARD = "4111 1111 1111 1111"
IBAN = "DE89 3704 0044 0532 0130 00"
IBAN_COMPACT = "DE89370400440532013000"
DE_PHONE = "+49 30 12345678"
FR_NAME, FR_EMAIL = "François Dupont", "francois.dupont.planted@exemple.fr"
DE_NAME, DE_EMAIL = "Jürgen Müller", "juergen.mueller.planted@beispiel.de"
ZH_NAME, ZH_EMAIL = "王小明", "wangxiaoming.planted@example.cn"

PLANTED: dict[str, str] = {
    # message fields
    "tool_args.email": "dora.args@example.com",
    "tool_args.github_token": GITHUB_TOKEN,
    "tool_args.json_key": "victor.argkey@example.com",
    "tool_args.pg_password": PG_PASSWORD,
    "tool_content.email": "erin.tool@example.com",
    "tool_content.aws_key": AWS_KEY,
    "message_name.user": "frank.name@example.com",
    "message_name.tool": "nina.toolname@example.com",
    "system_prompt.email": "grace.sys@example.com",
    "system_prompt.private_key": PEM_BODY,
    "assistant_text.jwt": JWT,
    "assistant_text.openai_key": OPENAI_KEY,
    "think.email": "heidi.think@example.com",
    "think.card": CARD,
    "reasoning_content.email": "olivia.reason@example.com",
    "user.pg_password_in_url": "pguser:" + PG_PASSWORD,
    "user.iban": IBAN,
    "user.de_phone": DE_PHONE,
    "user.fr_name": FR_NAME,
    "user.fr_email": FR_EMAIL,
    "user.de_name": DE_NAME,
    "user.de_email": DE_EMAIL,
    "user.zh_name": ZH_NAME,
    "user.zh_email": ZH_EMAIL,
    # nested fields outside messages
    "metadata.list.email": "ivan.list@example.com",
    "metadata.list_of_dicts.phone": "+1 212 555 0148",
    "metadata.dict_key.email": "judy.key@example.com",
    "metadata.number_as_string.card": "4242424242424242",
    "metadata.number.card": "5555555555554444",
    "metadata.iban_compact": IBAN_COMPACT,
    "toplevel_key.email": "mallory.toplevel@example.com",
    "tools_schema.email": "oscar.tools@example.com",
    # rows dropped by curation (dedup, hard filter)
    "dropped_dup.dict_key.email": "sybil.dupkey@example.com",
    "dropped_dup.name.email": "uma.dupname@example.com",
    "dropped_nouser.content.email": "peggy.dropped@example.com",
    "dropped_nouser.dict_key.email": "trent.dropkey@example.com",
    "dropped_nouser.name.email": "walter.dropname@example.com",
    "dropped_nouser.aws_key": "AKIAQ2W4E6R8T1Y3U5I7",
}


def _variants(secret: str) -> list[bytes]:
    """The bytes a store may hold for ``secret``: raw UTF-8, JSON-escaped (ASCII and not),
    and JSON-in-JSON escaped."""
    once = json.dumps(secret)[1:-1]
    forms = {
        secret,
        once,
        json.dumps(secret, ensure_ascii=False)[1:-1],
        json.dumps(once)[1:-1],
    }
    return sorted(f.encode("utf-8") for f in forms)


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _rows() -> list[dict[str, Any]]:
    p = PLANTED
    rows = []
    for i in range(3):
        row = conversation(i)
        msgs = row["messages"]
        msgs[0]["content"] += f" Escalations go to {p['system_prompt.email']}. Deploy key:\n{PEM}\n"
        msgs[1]["content"] += (
            f" The database is at {PG_URL}; refunds go to IBAN {IBAN}."
            f" You can call me on {DE_PHONE}."
        )
        msgs[1]["name"] = p["message_name.user"]
        # The first assistant turn reasons in <think> and in reasoning_content.
        msgs[2]["content"] = (
            f"<think>The user {p['think.email']} paid with card {CARD}, I should not repeat"
            f" it.</think>{msgs[2]['content']}"
        )
        msgs[2]["reasoning_content"] = f"Contact was {p['reasoning_content.email']} earlier."
        msgs[3]["content"] = (
            f"File written: value.txt (uploaded by {p['tool_content.email']} with {AWS_KEY})"
        )
        msgs[3]["name"] = p["message_name.tool"]
        msgs[4]["content"] = (
            f"Now I print it back to check. For the record, the service token is {JWT}"
            f" and the OpenAI key is {OPENAI_KEY}."
        )
        # An extra tool call whose JSON arguments hold an e-mail, a token, a JSON key that is
        # an e-mail and a connection string with its password.
        extra = _call(
            f"c{i}-x",
            "run_command",
            {
                "command": f"echo ok # notify {p['tool_args.email']} {GITHUB_TOKEN} {PG_URL}",
                "env": {p["tool_args.json_key"]: "1"},
            },
        )
        msgs[6:6] = [
            {"role": "assistant", "content": "One more check.", "tool_calls": [extra]},
            {"role": "tool", "tool_call_id": f"c{i}-x", "content": "ok"},
        ]
        msgs[-1]["content"] += (
            f" Bonjour {FR_NAME} ({FR_EMAIL}), Grüße an {DE_NAME} ({DE_EMAIL})."
            f" 我叫{ZH_NAME}，我的邮箱是 {ZH_EMAIL}。"
        )
        # user names too, in prose the NER sees
        msgs[1]["content"] += f" Regards, {FR_NAME} and {DE_NAME}. 联系人：{ZH_NAME}。"
        row["metadata"] = {
            "contacts": [p["metadata.list.email"], {"phone": p["metadata.list_of_dicts.phone"]}],
            "seen": {p["metadata.dict_key.email"]: 1},
            "card_text": p["metadata.number_as_string.card"],
            "card_number": int(p["metadata.number.card"]),
            "accounts": [[IBAN_COMPACT]],
        }
        row[p["toplevel_key.email"]] = "owner"
        row["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": "run_command",
                    "description": f"Run a shell command. Owner: {p['tools_schema.email']}.",
                    "parameters": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                        "required": ["command"],
                    },
                },
            }
        ]
        rows.append(row)
    # Dropped by dedup (which compares messages' role, text and tool calls only): a copy of
    # row 0 with a dict key and a message name that only the copy holds.
    dup = copy.deepcopy(rows[0])
    dup["metadata"]["seen"][p["dropped_dup.dict_key.email"]] = 2
    dup["messages"][1]["name"] = p["dropped_dup.name.email"]
    rows.append(dup)
    # Dropped by the hard filter (no user message).
    nouser = conversation(3)
    nouser["id"] = "conv-nouser"
    nouser["messages"] = [
        nouser["messages"][0],
        {
            "role": "assistant",
            "name": p["dropped_nouser.name.email"],
            "content": f"Mail {p['dropped_nouser.content.email']} the key"
            f" {p['dropped_nouser.aws_key']} please, it is urgent for the audit.",
        },
    ]
    nouser["metadata"] = {"seen": {p["dropped_nouser.dict_key.email"]: 1}}
    rows.append(nouser)
    return rows


def _files(*places: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for place in places:
        files = [place] if place.is_file() else [f for f in place.rglob("*") if f.is_file()]
        out.update({str(f): f.read_bytes() for f in files})
    return out


def _holding(secret: str, stored: dict[str, bytes]) -> dict[str, str]:
    """File -> an excerpt of the bytes around the first hit, for each file holding it."""
    hits = {}
    for path, data in stored.items():
        for form in _variants(secret):
            at = data.find(form)
            if at >= 0:
                hits[path] = data[max(0, at - 80) : at + len(form) + 40].decode("utf-8", "replace")
                break
    return hits


@pytest.fixture(scope="module")
def run(prefect_api, tmp_path_factory) -> dict[str, Any]:
    """One pipeline run over the planted rows; the stores' bytes afterwards."""
    tmp = tmp_path_factory.mktemp("privacy_attack")
    state, _ = run_planted(tmp, _rows())
    src = tmp / "planted.jsonl"
    return {
        "src": src,
        "state": flow_state(state),
        "summary": state.result() if flow_state(state) == "COMPLETED" else None,
        "mlflow_db": _files(*sorted(tmp.glob("mlflow.db*"))),
        "mlflow_artifacts": _files(tmp / "mlruns"),
        "prefect_db": _files(*(Path(p) for p in prefect_db_files())),
        "output": _files(tmp / "out"),
        "out_dir": str(tmp / "out"),
    }


def test_the_run_completes_and_drops_the_planted_rows(run):
    assert run["state"] == "COMPLETED"
    summary = run["summary"]
    assert summary["pii"] == "ran"
    assert summary["trajectories"] == 3
    assert summary["dropped"] == 2, summary["drops"]
    # The rewritten dropped-row log reached MLflow, so the dropped rows were searched there.
    assert any(p.endswith(".dropped.jsonl") for p in run["mlflow_artifacts"])
    assert run["prefect_db"], "no Prefect database files found"


def test_every_planted_string_is_in_the_input(run):
    raw = run["src"].read_bytes()
    assert [k for k, s in PLANTED.items() if not any(v in raw for v in _variants(s))] == []


@pytest.mark.parametrize("store", ["mlflow_db", "mlflow_artifacts", "prefect_db"])
@pytest.mark.parametrize("label", sorted(PLANTED))
def test_planted_string_never_reaches_the_store(run, store, label):
    hits = _holding(PLANTED[label], run[store])
    assert hits == {}, f"{label} ({PLANTED[label]!r}) found in {store}: {hits}"


def test_the_local_curated_and_scored_files_hold_no_planted_string(run):
    """The output folder is the user's own: its dropped-row log and the stream's work shards
    keep rows as they were dropped (dedup drops before the PII step). What the run hands on,
    the curated and scored files, has been through the rewrite."""
    out = run["output"]
    handed_on = {
        p: data
        for p, data in out.items()
        if p.endswith(("curated/examples.jsonl", "trajectories/examples.scored.jsonl"))
    }
    assert len(handed_on) == 2, sorted(out)
    found = {label: sorted(_holding(s, handed_on)) for label, s in PLANTED.items()}
    assert {k: v for k, v in found.items() if v} == {}
    # The local dropped log keeps the raw rows: the planted strings of dropped rows are there.
    dropped = {p: d for p, d in out.items() if p.endswith("curated/examples.dropped.jsonl")}
    assert _holding(PLANTED["dropped_nouser.aws_key"], dropped)
