"""`twinkle run` wired to the pipeline flow: options become parameters, the summary is printed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner


@pytest.mark.slow
def test_twinkle_run_replays_the_input_and_prints_the_summary(
    prefect_api, tmp_path, conversations_file
):
    from twinkle.cli import main

    db = tmp_path / "mlflow.db"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--input",
            conversations_file,
            "--output",
            str(tmp_path / "out"),
            "--tracking-uri",
            f"sqlite:///{db}",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["rows_in"] == 5 and summary["trajectories"] == 4
    assert summary["policy"] == "replay" and "tasks" not in summary["skipped"]
    assert summary["tracking_uri"] == f"sqlite:///{db}"
    assert (tmp_path / "mlruns").is_dir()  # artifacts beside the database, not in the cwd


def test_twinkle_run_rejects_a_model_without_an_endpoint():
    from twinkle.cli import main

    result = CliRunner().invoke(main, ["run", "--model", "m"])
    assert result.exit_code != 0 and "--base-url and --model go together" in result.output


def test_twinkle_run_with_a_ray_address_but_no_prefect_server_says_what_to_start(monkeypatch):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from twinkle.cli import main

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    # No API URL even if another test of the session started the test harness's API.
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        result = CliRunner().invoke(main, ["run", "--ray-address", "ray://127.0.0.1:10001"])
    assert result.exit_code == 2, result.output
    assert "PREFECT_API_URL" in result.output and "start-server.sh" in result.output
