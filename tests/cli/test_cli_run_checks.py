"""``twinkle run`` refuses unusable inputs, URLs and tracking URIs before Prefect starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from click.testing import CliRunner

from twinkle.cli import main


def test_a_missing_input_fails_in_seconds_with_one_line_and_no_traceback(tmp_path):
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle", "run", "--input", "nope.jsonl"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.perf_counter() - started < 5
    assert proc.returncode == 2, proc.stderr
    assert "input nope.jsonl does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "mlflow.db").exists()  # no MLflow run, so none left RUNNING


def test_bad_urls_and_tracking_uris_are_named():
    result = CliRunner().invoke(
        main,
        ["run", "--base-url", "localhost:8000", "--model", "m", "--tracking-uri", "mlfow://x"],
    )
    assert result.exit_code == 2
    assert "--base-url 'localhost:8000' is not an http(s) URL" in result.output
    assert "unknown scheme" in result.output


def test_the_options_say_what_they_do():
    out = CliRunner().invoke(main, ["run", "--help"]).output
    for option in (
        "--max-turns",
        "--concurrency",
        "--trace-sample-rate",
        "--limit",
        "--experiment",
    ):
        assert option in out
    assert "Model calls per trajectory" in out and "Share of trajectories traced" in out
    flat = " ".join(out.split())
    assert "math, multiple_choice or code" in flat and "repeat the option" in flat  # --tasks
    assert "--log-dropped-rows Upload the rows curation dropped" in flat
    assert "after the PII rewrite" in flat


def test_a_tracking_password_moves_to_mlflows_variables(monkeypatch):
    from twinkle.cli.run import _environ, _tracking_credentials

    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    uri, env, problem = _tracking_credentials("https://me:s3cret@mlflow.internal:5000")
    assert (uri, problem) == ("https://mlflow.internal:5000", None)
    assert env == {"MLFLOW_TRACKING_USERNAME": "me", "MLFLOW_TRACKING_PASSWORD": "s3cret"}
    with _environ(env):
        assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "s3cret"
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "someone-else")
    _, env, problem = _tracking_credentials("https://me:s3cret@mlflow.internal:5000")
    assert env == {} and "MLFLOW_TRACKING_USERNAME" in problem and "s3cret" not in problem
