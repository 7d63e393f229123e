"""twinkle.preflight: what a run needs, checked before work, one line per problem."""

from __future__ import annotations

import pytest

from tests.net import free_port
from twinkle.preflight import (
    PreflightError,
    check_credentials,
    check_inputs,
    check_tracking_uri,
    check_url,
    probe,
    split_credentials,
)


def test_inputs_missing_or_empty_folders_are_named(tmp_path):
    good = tmp_path / "rows.jsonl"
    good.write_text("{}\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "zero.jsonl").write_text("")
    paths = [good, tmp_path / "nope.jsonl", tmp_path / "empty", tmp_path / "zero.jsonl"]
    problems = check_inputs([str(p) for p in paths])
    assert len(problems) == 3
    assert "nope.jsonl does not exist" in problems[0] and "without" in problems[1]
    assert problems[2] == f"input {tmp_path / 'zero.jsonl'} is empty: give a file with rows"


def test_urls_need_a_scheme_and_a_host_and_passwords_stay_out_of_messages():
    assert check_url("http://127.0.0.1:8000/v1", "x") is None
    assert "not an http(s) URL" in check_url("localhost:8000", "--base-url")
    bad = check_url("http://u:secret@h:port/v1", "--base-url")
    assert "malformed" in bad and "secret" not in bad


def test_tracking_uris(tmp_path):
    assert check_tracking_uri(f"sqlite:///{tmp_path}/new/mlflow.db") is None
    assert "folder" in check_tracking_uri(f"sqlite:///{tmp_path}")
    (tmp_path / "a-file").write_text("x")  # a file where a folder of the path should be
    assert check_tracking_uri(f"sqlite:///{tmp_path}/a-file/sub/mlflow.db") == (
        f"tracking URI sqlite:///{tmp_path}/a-file/sub/mlflow.db: {tmp_path}/a-file is a file, "
        "not a folder: pick another path"
    )
    assert "unknown scheme" in check_tracking_uri("mlfow://x")
    dead = check_tracking_uri(f"http://127.0.0.1:{free_port()}")
    assert "unreachable" in dead and "--tracking-uri" in dead


def test_probe_names_the_url_and_its_status(chat_server):
    assert probe(chat_server.base_url + "/models", "policy endpoint") is None
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert probe(url, "policy endpoint").startswith(f"policy endpoint {url}: unreachable")


def test_preflight_error_joins_its_lines():
    err = PreflightError(["a", "b"])
    assert str(err) == "a; b" and err.problems == ["a", "b"] and isinstance(err, ValueError)
    with pytest.raises(PreflightError):
        raise err


def test_credentials_in_a_url_are_found_split_off_and_masked():
    assert split_credentials("https://me:p%40ss@host:8000/v1?x=1") == (
        "https://host:8000/v1?x=1",
        "me",
        "p@ss",
    )
    assert split_credentials("http://tok3n@host/v1") == ("http://host/v1", "tok3n", None)
    for clean in ("http://host/v1?to=a@b", "sqlite:////tmp/a@b/mlflow.db", "host:6379"):
        assert split_credentials(clean) == (clean, None, None)
        assert check_credentials(clean, "x", "fix") is None
    problem = check_credentials("http://tok3n@host/v1", "--base-url", "use --api-key-env")
    assert problem.startswith("--base-url 'http://***@host/v1' carries credentials")
    assert problem.endswith("use --api-key-env") and "tok3n" not in problem
