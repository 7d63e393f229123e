"""PIIPresidioFilter against the real Presidio engine, spaCy model, jieba and Faker.

The engine is built once per process (about 3-6 s here); every test reuses it.
"""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys

import pytest

from twinkle.preprocessor.pii_presidio_filter import (
    PIIPresidioFilter,
    Strategy,
    _hash_short,
    _is_valid_cn_id,
    _is_valid_luhn,
    _mask_keep_edges,
)

CARD = "4111 1111 1111 1111"
CN_ID = "11010519491231002X"
GH_TOKEN = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"


@pytest.fixture(scope="module")
def pii() -> PIIPresidioFilter:
    f = PIIPresidioFilter(seed=7)
    f([{"messages": [{"role": "user", "content": "warm up John"}]}])  # builds the shared engine
    return f


def user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def rewrite(f: PIIPresidioFilter, text: str) -> str:
    kept, dropped = f([user(text)])
    assert dropped == []
    return kept[0]["messages"][0]["content"]


# -- pure helpers -----------------------------------------------------------------------------


def test_strategy_coerce():
    assert Strategy.coerce("hash") is Strategy.HASH
    assert Strategy.coerce(Strategy.MASK) is Strategy.MASK
    assert Strategy.MASK == "mask"
    with pytest.raises(
        ValueError, match="Unknown strategy 'Mask'. Allowed: mask, replace, redact, hash"
    ):
        Strategy.coerce("Mask")


def test_checksums_and_masks():
    assert _is_valid_cn_id(CN_ID) and _is_valid_cn_id(CN_ID.lower())
    assert not _is_valid_cn_id("110105194912310021")
    assert not _is_valid_cn_id("1101051949123100")
    assert _is_valid_luhn(CARD) and not _is_valid_luhn("4111 1111 1111 1112")
    assert not _is_valid_luhn("4242")  # fewer than 13 digits
    assert _mask_keep_edges("13812345678") == "138****5678"
    assert _mask_keep_edges("1234567") == "*******"
    assert _mask_keep_edges("") == ""
    assert _hash_short("x", "salt") == _hash_short("saltx") and len(_hash_short("x")) == 12


def test_constructor_validates():
    with pytest.raises(ValueError, match="No spaCy model configured for language 'xx'"):
        PIIPresidioFilter(languages=["xx"])
    with pytest.raises(ValueError, match="score_threshold"):
        PIIPresidioFilter(score_threshold=2)
    with pytest.raises(ValueError, match="Unknown strategy"):
        PIIPresidioFilter(entity_strategy={"person": "scramble"})


# -- English ----------------------------------------------------------------------------------


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_english_identifiers_are_masked_and_names_replaced(pii):
    text = (
        f"Hi, I am John Smith from Acme Corp in Berlin. Mail john.smith@example.com or call "
        f"+1 212-555-0187. Card {CARD}, IBAN GB82 WEST 1234 5698 7654 32, server 10.0.0.12, "
        f"token {GH_TOKEN}."
    )
    out = rewrite(pii, text)
    for secret in (
        "John Smith",
        "Acme Corp",
        "Berlin",
        "john.smith@example.com",
        "212-555",
        "1111 1111 1111",
        "WEST 1234",
        "10.0.0.12",
        GH_TOKEN,
    ):
        assert secret not in out, secret
    assert "**** **** **** ****" in out  # masked: every digit, separators kept
    assert "***_" + "*" * (len(GH_TOKEN) - 4) in out
    assert "@" in out  # the e-mail became another e-mail, not stars


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_invalid_checksums_are_left_alone(pii):
    text = "Order 4111 1111 1111 1112 shipped, ref 110105194912310021."
    assert rewrite(pii, text) == text


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_text_without_letters_is_still_scanned(pii):
    assert rewrite(pii, CARD) == "**** **** **** ****"
    assert rewrite(pii, "--- 42 ---") == "--- 42 ---"


# -- Chinese ----------------------------------------------------------------------------------


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_chinese_row(pii):
    text = (
        f"我叫王伟，住在北京市海淀区，身份证号{CN_ID}，手机13912345678，"
        f"邮箱是wangwei@example.cn，谢谢。服务器1.2.3.4连不上"
    )
    out = rewrite(pii, text)
    for secret in ("王伟", "北京市海淀区", CN_ID, "13912345678", "wangwei@example.cn", "1.2.3.4"):
        assert secret not in out, secret
    # ASCII-bounded patterns: the Chinese words around the PII survive.
    for kept in ("我叫", "身份证号", "手机***********", "邮箱是", "谢谢", "服务器", "连不上"):
        assert kept in out, kept
    assert "*" * 18 in out


# -- consistency ------------------------------------------------------------------------------


def _name_rows():
    return [
        {
            "messages": [
                {"role": "user", "content": "Please email Maria Garcia today."},
                {"role": "assistant", "content": "I told Maria Garcia already."},
            ]
        },
        {"messages": [{"role": "user", "content": "Did Maria Garcia reply?"}]},
    ]


def _pseudonym(text: str, prefix: str, suffix: str) -> str:
    assert text.startswith(prefix) and text.endswith(suffix), text
    return text[len(prefix) : len(text) - len(suffix)]


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_pseudonyms_consistent_within_row_and_call(pii):
    kept, _ = pii(_name_rows())
    a = _pseudonym(kept[0]["messages"][0]["content"], "Please email ", " today.")
    b = _pseudonym(kept[0]["messages"][1]["content"], "I told ", " already.")
    c = _pseudonym(kept[1]["messages"][0]["content"], "Did ", " reply?")
    assert a == b == c != "Maria Garcia"


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_without_consistency_rows_get_their_own_pseudonyms():
    f = PIIPresidioFilter(languages=["en"], consistency=False, seed=1)
    kept, _ = f(_name_rows())
    a = _pseudonym(kept[0]["messages"][0]["content"], "Please email ", " today.")
    b = _pseudonym(kept[0]["messages"][1]["content"], "I told ", " already.")
    c = _pseudonym(kept[1]["messages"][0]["content"], "Did ", " reply?")
    assert a == b  # within a row, always
    assert c != a


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_persistent_consistency_spans_calls():
    f = PIIPresidioFilter(languages=["en"], persistent_consistency=True)
    first = rewrite(f, "Maria Garcia called.")
    assert rewrite(f, "Maria Garcia called.") == first != "Maria Garcia called."


# -- message fields ---------------------------------------------------------------------------


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_tool_calls_reasoning_and_tool_outputs(pii):
    args = {"to": "john.smith@example.com", "body": "Dear John Smith", "count": 3}
    row = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Write to John Smith"},
                    {"type": "image", "image": "john.png"},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "John Smith wants a mail.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "send", "arguments": json.dumps(args)},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "send", "arguments": args},
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": '{"sent_to": "john.smith@example.com"}',
            },
        ]
    }
    original = copy.deepcopy(row)
    kept, dropped = pii([row])
    assert dropped == [] and row == original  # input untouched
    out = kept[0]["messages"]
    assert out[0]["content"][1] == {"type": "image", "image": "john.png"}
    person = _pseudonym(out[0]["content"][0]["text"], "Write to ", "")
    assert out[1]["reasoning_content"] == f"{person} wants a mail."
    decoded = json.loads(out[1]["tool_calls"][0]["function"]["arguments"])
    assert decoded["body"] == f"Dear {person}" and decoded["count"] == 3
    email = decoded["to"]
    assert email != args["to"] and "@" in email
    assert out[1]["tool_calls"][1]["function"]["arguments"]["to"] == email
    assert json.loads(out[2]["content"]) == {"sent_to": email}
    assert out[2]["tool_call_id"] == "c1"


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_json_tool_output_is_scanned_per_value(pii):
    row = {
        "messages": [
            {"role": "tool", "content": '{"guest":  "Miguel Jones", "nights": 2}'},
            {"role": "tool", "content": '{"status":  "ok"}'},
        ]
    }
    kept, _ = pii([row])
    guest = json.loads(kept[0]["messages"][0]["content"])
    assert guest["nights"] == 2 and guest["guest"] not in ("Miguel Jones", "")
    assert kept[0]["messages"][1]["content"] == '{"status":  "ok"}'  # unchanged: byte-identical


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_a_value_found_once_is_rewritten_everywhere_in_the_row(pii):
    row = {
        "messages": [
            {"role": "user", "content": "Miguel Jones wants a hotel in Vargastown."},
            {
                "role": "assistant",
                "content": "Vargastown",
                "reasoning_content": "Vargastown, got it",
            },
        ]
    }
    kept, _ = pii([row])
    msgs = kept[0]["messages"]
    assert "Vargastown" not in json.dumps(msgs)
    city = _pseudonym(msgs[0]["content"], "", ".").split(" wants a hotel in ")[1]
    assert msgs[1]["content"] == city and msgs[1]["reasoning_content"] == f"{city}, got it"


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_string_form_tool_calls_stay_strings(pii):
    calls = json.dumps(
        [{"id": "c1", "function": {"name": "dial", "arguments": json.dumps({"n": "13812345678"})}}]
    )
    kept, _ = pii([{"messages": [{"role": "assistant", "content": "", "tool_calls": calls}]}])
    new = kept[0]["messages"][0]["tool_calls"]
    assert isinstance(new, str)
    assert json.loads(json.loads(new)[0]["function"]["arguments"]) == {"n": "***********"}


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_roles_limit_what_is_rewritten():
    f = PIIPresidioFilter(languages=["en"], roles=("user",))
    row = {
        "messages": [
            {"role": "user", "content": "Call 13812345678"},
            {"role": "tool", "content": "Dialled 13812345678"},
        ]
    }
    kept, _ = f([row])
    assert [m["content"] for m in kept[0]["messages"]] == [
        "Call ***********",
        "Dialled 13812345678",
    ]


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_entity_strategy_and_counts():
    f = PIIPresidioFilter(
        languages=["en"],
        entity_strategy={"person": "hash", "EMAIL_ADDRESS": "redact"},
        hash_salt="s",
        record_counts=True,
    )
    kept, _ = f([user("John Smith wrote from john@example.com"), user("nothing here")])
    assert (
        kept[0]["messages"][0]["content"]
        == f"<PERSON:{_hash_short('John Smith', 's')}> wrote from "
    )
    assert kept[0]["_pii_hits"] == {"PERSON": 1, "EMAIL_ADDRESS": 1}
    assert "_pii_hits" not in kept[1]


# -- batches ----------------------------------------------------------------------------------


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_bad_rows_are_dropped_with_reasons(pii):
    huge = "a" * 1_000_001  # beyond spaCy's max_length: analysis of this text fails
    rows = [
        user("Call 13812345678"),
        7,
        {"messages": "hi"},
        {"messages": []},
        user(huge),
        {"messages": [{"role": "user", "content": 42}, "not a message"]},
    ]
    kept, dropped = pii(rows)
    assert len(kept) + len(dropped) == len(rows)
    assert [d["drop_reason"] for d in dropped] == [
        "malformed_row",
        "malformed_messages",
        "malformed_empty_messages",
        "pii_error:ValueError",
    ]
    assert kept[0]["messages"][0]["content"] == "Call ***********"
    assert kept[1]["messages"] == [{"role": "user", "content": 42}, "not a message"]


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_column_dict_input(pii):
    batch = {
        "id": ["a", "b"],
        "messages": [
            [{"role": "user", "content": "Call 13812345678"}],
            [{"role": "user", "content": "fine"}],
        ],
    }
    kept, dropped = pii(batch)
    assert dropped == []
    assert [r["id"] for r in kept] == ["a", "b"]
    assert kept[0]["messages"][0]["content"] == "Call ***********"


@pytest.mark.slow  # builds the Presidio engine and loads spaCy
def test_pickles_after_use(pii):
    clone = pickle.loads(pickle.dumps(pii))
    assert rewrite(clone, "Call 13812345678") == "Call ***********"


def test_lazy_export_and_missing_dependency_message():
    code = (
        "import sys; sys.modules['presidio_analyzer'] = None\n"
        "from twinkle.preprocessor import PIIPresidioFilter\n"
        "try:\n    PIIPresidioFilter()\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "presidio_analyzer" in out.stdout and "twinkle[pii]" in out.stdout
