"""`twinkle run` wired to the pipeline flow: options become parameters, the summary is printed."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from tests.flows.tests_flows_helpers import flow_run_artifacts, flow_run_logs


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
    _linked_and_logged(summary["run_key"], summary["mlflow_run_id"])

    # Again, as people read it: the stages served from the cache are listed, numbers rounded.
    again = CliRunner().invoke(
        main,
        [
            "run",
            "--input",
            conversations_file,
            "--output",
            str(tmp_path / "out"),
            "--tracking-uri",
            f"sqlite:///{db}",
        ],
    )
    assert again.exit_code == 0, again.output
    [reused] = [line for line in again.output.splitlines() if line.strip().startswith("reused")]
    assert "curate-stream" in reused and "run-rollouts-0" in reused, reused
    assert "--fresh recomputes" in reused
    assert not re.search(r"\d\.\d{5,}", again.output)  # no 0.9655172413793104
    assert "mean reward   1.000" in again.output


def _linked_and_logged(flow_run_id: str, mlflow_run_id: str) -> None:
    """The flow run's Prefect log holds the stage lines, with no third-party chatter, and its
    artifacts lead to the MLflow run."""
    text = flow_run_logs(flow_run_id)
    assert f"MLflow run {mlflow_run_id}:" in text
    assert "curation: 5 rows in, 4 out, 1 dropped" in text
    assert "rollout: 4 trajectories with policy replay" in text
    assert "Recognizer not added" not in text
    by_key = flow_run_artifacts(flow_run_id)
    for key in ("curation-summary", "rollout-summary"):
        assert f"MLflow run: `{mlflow_run_id}`" in by_key[key].data
        assert f"/runs/{mlflow_run_id})" in by_key[key].data
    for key in ("curation-drop-reasons", "rollout-rewards"):
        assert f"MLflow run: {mlflow_run_id}." in by_key[key].description


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
