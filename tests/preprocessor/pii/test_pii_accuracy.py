"""Issue 12 item 5 against the real engine: names in running text, passwords and secrets given
in text, masks that hide every digit, and pseudonyms that are a function of the input and the
salt (a rerun gives byte-identical output)."""

from __future__ import annotations

import json

import pytest

from twinkle.preprocessor.pii_presidio_filter import PIIPresidioFilter

pytestmark = pytest.mark.slow  # builds the Presidio engine and loads the spaCy model


@pytest.fixture(scope="module")
def pii() -> PIIPresidioFilter:
    return PIIPresidioFilter()


def rewrite(f: PIIPresidioFilter, text: str) -> str:
    kept, dropped = f([{"messages": [{"role": "user", "content": text}]}])
    assert dropped == []
    return kept[0]["messages"][0]["content"]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Reach Priscilla Vandermeer via the front desk if the build breaks.", "Vandermeer"),
        ("If the deploy fails, page Priscilla Vandermeer before midnight.", "Vandermeer"),
        ("The report was reviewed by Dr. Amelia Okonkwo last week.", "Okonkwo"),
        ("Forward the invoice to Tomasz Wisniewski in accounting.", "Wisniewski"),
        ("请联系张伟确认明天的会议安排。", "张伟"),
    ],
)
def test_names_in_running_text_are_found(pii, text, name):
    assert name not in rewrite(pii, text)


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        ("password: hunter2-secret", "hunter2", "password: "),
        ("Log in as admin with pwd=Tr0ub4dor&3 today.", "Tr0ub4dor", "with pwd="),
        ("My password is swordfish7, please reset it.", "swordfish7", "My password is "),
        ("The API secret: s3cr3t-v4lue was rotated.", "s3cr3t", "The API secret: "),
        ("数据库密码：abc12345xyz，别外传。", "abc12345xyz", "数据库密码："),
        ("パスワードは hanako2024 です。", "hanako2024", "パスワードは"),
        ("비밀번호: qwer1234! 입니다.", "qwer1234", "비밀번호: "),
    ],
)
def test_passwords_given_in_text_are_rewritten(pii, text, secret, kept):
    out = rewrite(pii, text)
    assert secret not in out and kept in out, out


@pytest.mark.parametrize(
    "text",
    [
        "The password is required to continue.",
        "Reset your password from the settings page.",
        "A strong password has at least twelve characters.",
    ],
)
def test_talk_about_passwords_is_left_alone(pii, text):
    assert rewrite(pii, text) == text


def test_masks_hide_every_digit(pii):
    out = rewrite(pii, "My SSN is 078-05-1120 and my phone is (212) 555-0198, or 13812345678.")
    assert out == "My SSN is ***-**-**** and my phone is (***) ***-****, or ***********."
    seed = PIIPresidioFilter(mask_head=3, mask_tail=4)  # the seed's masks, on request
    assert rewrite(seed, "Call 13812345678") == "Call 138****5678"


def _rows():
    return [
        {
            "id": f"r{i}",
            "messages": [
                {"role": "user", "content": f"Email Maria Garcia at maria{i}@example.com today."},
                {"role": "assistant", "content": "I wrote to Maria Garcia in Lisbon."},
            ],
        }
        for i in range(3)
    ]


def test_pseudonyms_are_deterministic_for_an_input_and_a_salt():
    dump = lambda rows: json.dumps(rows, ensure_ascii=False, sort_keys=True)  # noqa: E731
    first = PIIPresidioFilter()(_rows())[0]
    again = PIIPresidioFilter()(_rows())[0]  # a fresh filter: a rerun of curation
    assert dump(first) == dump(again)
    # Batching does not matter: the pseudonym depends on the value and the salt only.
    one_by_one = [PIIPresidioFilter()([r])[0][0] for r in _rows()]
    assert dump(one_by_one) == dump(first)
    salted = PIIPresidioFilter(hash_salt="other")(_rows())[0]
    assert dump(salted) != dump(first)
    assert dump(PIIPresidioFilter(hash_salt="other")(_rows())[0]) == dump(salted)
    assert "Maria Garcia" not in dump(first)
