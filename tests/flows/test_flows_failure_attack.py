"""Attacks on "a run that failed looks failed everywhere": endpoints that rate-limit, refuse
the key, answer garbage or hang; failures just under and just over ``max_failure_rate``;
inputs with nothing usable in them; an MLflow store that cannot be written. Each scenario
checks the four places: the ``twinkle run`` exit code and line, the Prefect flow run's state,
the MLflow run's status, and the summary (printed, returned, or the Prefect artifact)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flows.tests_flows_helpers import (
    flow_run_artifacts,
    flow_run_logs,
    flow_state,
    mlflow_client,
)
from twinkle.data_format.outcome import is_failed

pytestmark = pytest.mark.slow


# -- helpers --------------------------------------------------------------------------------------


class _Result:
    def __init__(self, exit_code: int, output: str) -> None:
        self.exit_code, self.output = exit_code, output


def _cli(tmp_path: Path, tracking, inputs: str, *extra: str) -> _Result:
    """``twinkle run`` as people run it, in its own process (so that whatever Prefect's
    console handler prints, a traceback included, is in the output), on the test API."""
    import os
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    args = ["--input", inputs, "--output", str(tmp_path / "out")]
    args += ["--tracking-uri", tracking.tracking_uri, *extra]
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle", "run", *args],
        env={
            **os.environ,
            "PREFECT_API_URL": PREFECT_API_URL.value(),
            "PYTHONPATH": str(Path.cwd()),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    return _Result(proc.returncode, proc.stdout)


def _pipeline_runs() -> list:
    """The flow runs of the pipeline flow on the test API, newest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["twinkle-pipeline"])),
            sort=FlowRunSort.EXPECTED_START_TIME_DESC,
            limit=50,
        )


def _flow_run_state(flow_run_id) -> str:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id).state.type.value


def _mlflow_runs(tracking) -> dict:
    """Stage name (None for the run itself) -> MLflow run, for a store holding one run."""
    client, exp = mlflow_client(tracking)
    return {r.data.tags.get("twinkle.stage"): r for r in client.search_runs([exp])}


def _reason(output: str) -> str:
    """The CLI's error line (click prints ``Error: ...``)."""
    lines = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, output[-3000:]
    return lines[0]


def _scored(tmp_path: Path) -> list[dict]:
    [path] = (tmp_path / "out").glob("*/trajectories/*.scored.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _failed_everywhere(result, tmp_path: Path, tracking, url: str, status: str) -> None:
    """The four places all say Failed, and the reason names the endpoint and its status."""
    # CLI: exit 1, one line naming the endpoint, its status and the first errors; no traceback.
    assert result.exit_code == 1, result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-3000:]
    reason = _reason(result.output)
    assert f"policy endpoint {url}: {status}" in reason, reason
    assert "first errors: " in reason, reason
    # MLflow: the run FAILED, none left RUNNING (the rollout stage's own status is checked
    # by the threshold test, so that these scenarios show their other findings).
    runs = _mlflow_runs(tracking)
    assert runs[None].info.status == "FAILED", {k: r.info.status for k, r in runs.items()}
    assert not any(r.info.status == "RUNNING" for r in runs.values())
    assert url in runs[None].data.tags["twinkle.error"]
    assert not any(k.startswith("reward.") for k in runs["rollout"].data.metrics)
    # Prefect: the flow run the MLflow run is keyed by is Failed.
    flow_run_id = runs[None].data.tags["twinkle.run_key"]
    assert _flow_run_state(flow_run_id) == "FAILED"
    # Summary: the rollout artifact leads with the failure, naming the endpoint.
    markdown = flow_run_artifacts(flow_run_id)["rollout-summary"].data
    assert "> **Failed: " in markdown and url in markdown, markdown
    # Errors are never rewards.
    scored = _scored(tmp_path)
    assert scored and all(is_failed(t) for t in scored), [t["stop_reason"] for t in scored]
    assert all(t["rewards"] == {} and t["reward_outcome"] == "failed" for t in scored)


# -- the endpoint misbehaves --------------------------------------------------------------------


def _rate_limited(request):
    from twinkle.testing.openai_server import Reply

    return Reply(
        body={"error": {"message": "slow down", "type": "rate_limit"}},
        status=429,
        headers={"retry-after": "0"},
    )


def _bad_key(request):
    from twinkle.testing.openai_server import Reply

    return Reply(body={"error": {"message": "Incorrect API key", "type": "auth"}}, status=401)


def _not_json(request):
    from twinkle.testing.openai_server import garbage

    return garbage()(request)


def _not_a_completion(request):
    # 200 and valid JSON, but nothing of a chat completion in it ("choices" missing).
    from twinkle.testing.openai_server import Reply

    return Reply(body={"status": "ok", "detail": "the gateway says hello"})


def _hang(request):
    from twinkle.testing.openai_server import Reply

    return Reply(body={"error": "late"}, status=500, delay_s=120)


@pytest.mark.parametrize(
    ("responder", "status", "extra"),
    [
        (_rate_limited, "HTTP 429", ()),
        (_bad_key, "HTTP 401", ()),
        (_not_json, "replying with bodies that are not JSON", ()),
        (_not_a_completion, "replying with no chat completion", ()),
        # --request-timeout bounds each model call: a hung endpoint fails the run in seconds.
        (_hang, "timing out", ("--request-timeout", "1.5")),
    ],
    ids=["429-forever", "401-bad-key", "200-not-json", "200-json-not-a-completion", "hangs"],
)
def test_an_endpoint_that_never_gives_a_usable_answer_fails_everywhere(
    prefect_api, tmp_path, conversations_file, tracking_params, responder, status, extra
):
    from twinkle.testing.openai_server import OpenAIServer

    with OpenAIServer(responder) as server:
        result = _cli(
            tmp_path,
            tracking_params,
            conversations_file,
            *("--base-url", server.base_url, "--model", "m", "--tasks", "math"),
            *("--concurrency", "16", *extra),
        )
        asked = len(server.requests)
    assert asked > 0, result.output[-3000:]  # the probe passed: the chat calls failed
    _failed_everywhere(result, tmp_path, tracking_params, server.base_url, status)
    if extra:  # the line says which bound the calls hit
        assert "within request_timeout_s=1.5 s" in _reason(result.output), result.output[-3000:]


# -- the threshold -------------------------------------------------------------------------------


def test_failures_just_under_the_threshold_warn_and_just_over_it_fail(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    """One of the four curated conversations fails (25%): at max_failure_rate 0.25 the run
    completes with a warning everywhere; at 0.24 it fails everywhere."""
    from flows.params import CurationParams, PolicyParams, RolloutParams, RunParams
    from flows.pipeline import pipeline_flow
    from twinkle.rollout.runner import RunFailedError
    from twinkle.testing.openai_server import OpenAIServer, echo

    answer = echo()

    def fail_conversation_0(request):
        if "the number 0 to" in json.dumps(request.get("messages")):
            return (503, {"error": {"message": "overloaded"}})
        return answer(request)

    def run(rate: float, key: str):
        return pipeline_flow(
            CurationParams(inputs=[conversations_file]),
            RolloutParams(
                tasks=[],
                concurrency=4,
                max_failure_rate=rate,
                policy=PolicyParams(base_url=server.base_url, model="m", request_timeout_s=30),
            ),
            tracking_params.model_copy(update={"run_key": key}),
            RunParams(output_dir=str(tmp_path / "out")),
            return_state=True,
        )

    with OpenAIServer(fail_conversation_0) as server:
        under = run(0.25, "under")
        over = run(0.24, "over")

    client, exp = mlflow_client(tracking_params)
    by_key = {
        r.data.tags.get("twinkle.run_key")
        + (f"/{r.data.tags['twinkle.stage']}" if "twinkle.stage" in r.data.tags else ""): r
        for r in client.search_runs([exp])
    }

    # Just under (equal to the threshold): Completed, FINISHED, with the warning in every place.
    assert flow_state(under) == "COMPLETED"
    summary = under.result()
    assert summary["trajectories"] == 4 and summary["failed"] == 1
    warning = summary.get("warning") or ""
    assert warning.startswith(
        "rollout: 1 of 4 trajectories failed (25%, within max_failure_rate 25%)"
    ), summary
    assert server.base_url in warning or "HTTP 503" in warning, warning
    under_id = under.state_details.flow_run_id
    assert warning in flow_run_logs(under_id)
    assert f"> **{warning}**" in flow_run_artifacts(under_id)["rollout-summary"].data
    assert by_key["under"].info.status == "FINISHED"
    scored = [json.loads(line) for line in Path(summary["scored_path"]).read_text().splitlines()]
    [failed] = [t for t in scored if is_failed(t)]
    assert failed["rewards"] == {} and failed["reward_outcome"] == "failed"
    stage = by_key["under#stage/rollout"]
    assert stage.data.metrics.get("failed") == 1
    # The three answered conversations are unscored (no reward function for a live policy's
    # conversation), so the one error must not have made a mean of 0.0 appear.
    assert summary["reward_mean"] is None
    assert not any(k.startswith("reward.") for k in stage.data.metrics)

    # Just over: Failed in Prefect, FAILED in MLflow, the reason names the endpoint.
    assert flow_state(over) == "FAILED"
    error = over.result(raise_on_failure=False)
    assert isinstance(error, RunFailedError), repr(error)
    assert "1 of 4 trajectories failed (25%, over max_failure_rate 24%)" in str(error)
    assert f"policy endpoint {server.base_url}: HTTP 503" in str(error)
    assert by_key["over"].info.status == "FAILED"
    # The rollout stage of a failed run is an MLflow run too: it must not read FINISHED.
    assert by_key["over#stage/rollout"].info.status in ("FAILED", "KILLED"), by_key[
        "over#stage/rollout"
    ].info
    over_id = over.state_details.flow_run_id
    assert "> **Failed: " in flow_run_artifacts(over_id)["rollout-summary"].data


# -- inputs with nothing in them ----------------------------------------------------------------


def _write_input(tmp_path: Path, kind: str) -> str:
    path = tmp_path / f"{kind}.jsonl"
    if kind == "empty":
        path.write_text("")
    elif kind == "all-dropped":  # OpenAI rows whose messages the filters drop, every one
        rows = [
            {"messages": []},
            {"messages": [{"role": "user", "content": "hello?"}]},
            {"messages": "not a list"},
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:  # not JSON at all
        path.write_text("this is not json\nneither is this {\n")
    return str(path)


@pytest.mark.parametrize("kind", ["empty", "all-dropped", "not-json"])
def test_an_input_with_nothing_usable_is_not_a_silent_green_run(
    prefect_api, tmp_path, tracking_params, kind
):
    """A run that curated 0 rows and rolled out 0 trajectories did nothing: it must say so
    (fail with one line naming the input, or warn in the CLI output and the Prefect log),
    never print an ordinary summary and exit 0."""
    before = {r.id for r in _pipeline_runs()}
    inputs = _write_input(tmp_path, kind)
    result = _cli(tmp_path, tracking_params, inputs)
    assert "Traceback" not in result.output, result.output[-3000:]
    new = [r for r in _pipeline_runs() if r.id not in before]
    if result.exit_code != 0:
        reason = _reason(result.output)
        assert Path(inputs).name in reason, reason
        for flow_run in new:  # refused in the flow (or before it): never Completed
            assert _flow_run_state(flow_run.id) in ("FAILED", "CRASHED")
        db = Path(tracking_params.tracking_uri[len("sqlite:///") :])
        if db.exists():
            client, exp = mlflow_client(tracking_params)
            statuses = [r.info.status for r in client.search_runs([exp]) if exp]
            assert "RUNNING" not in statuses and (not statuses or "FAILED" in statuses)
        return
    # Exit 0: then the run must at least warn that it did nothing, everywhere.
    [flow_run] = new
    assert _flow_run_state(flow_run.id) == "COMPLETED"
    warnings = [line for line in result.output.splitlines() if "warning" in line.lower()]
    assert warnings, "exit 0 with nothing curated and no warning:\n" + result.output[-3000:]
    assert any("0 rows" in w or "no rows" in w or "nothing" in w for w in warnings), warnings
    logs = flow_run_logs(flow_run.id)
    assert any(w.split("warning", 1)[-1].strip() in logs for w in warnings), logs[-3000:]


# -- the MLflow store cannot be written ---------------------------------------------------------


def test_a_tracking_store_that_cannot_be_written_is_refused_before_the_run(
    prefect_api, tmp_path, conversations_file
):
    """The SQLite file's folder is a regular file (a typo'd path; as root a read-only
    folder is still writable, so this is the unwritable store a test can make): the check
    before the run must refuse it with one line naming the URI, exit 2, and start nothing."""
    from flows.params import TrackingParams

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the database folder should be\n")
    tracking = TrackingParams(
        tracking_uri=f"sqlite:///{blocker / 'mlflow.db'}",
        artifact_location=str(tmp_path / "mlruns"),
    )
    before = {r.id for r in _pipeline_runs()}
    result = _cli(tmp_path, tracking, conversations_file)
    new = [r for r in _pipeline_runs() if r.id not in before]
    assert result.exit_code != 0, result.output[-3000:]
    assert all(_flow_run_state(r.id) in ("FAILED", "CRASHED") for r in new)
    error_lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(error_lines) == 1, result.output[-3000:]
    # Every way this falls short of a preflight refusal, listed together.
    problems = []
    if "Traceback" in result.output:
        problems.append("a traceback is printed")
    if "tracking URI" not in error_lines[0] or str(blocker) not in error_lines[0]:
        problems.append(f"the line does not name the tracking URI: {error_lines[0]!r}")
    if result.exit_code != 2:
        problems.append(f"exit {result.exit_code}, not the usage error 2 of the preflight")
    if new:
        problems.append(f"{len(new)} flow run(s) started (and Failed) before the refusal")
    assert not problems, problems
