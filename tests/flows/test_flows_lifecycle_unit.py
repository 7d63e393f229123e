"""flows.lifecycle without services: the MLflow run's end state, the run folder and its
``latest`` pointer, links to MLflow."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from flows.lifecycle import mlflow_run_url, point_latest, run_folder, run_guard


class _Client:
    def __init__(self, running: list[str]) -> None:
        self.running, self.ended = running, {}

    def search_runs(self, experiments, filter_string, max_results):
        if "#stage" in filter_string:
            return [SimpleNamespace(info=SimpleNamespace(run_id=r)) for r in self.running]
        return []

    def set_terminated(self, run_id, status):
        self.ended[run_id] = status


class _Tracker:
    experiment_id = "1"
    tracking_uri = "sqlite:////tmp/mlflow.db"

    def __init__(self, running: list[str]) -> None:
        self.client, self.tags, self.ends = _Client(running), {}, []

    def set_tags(self, run_id, tags):
        self.tags.update(tags)

    def end_run(self, run_id, status="FINISHED"):
        self.ends.append((run_id, status))


def _ctx(running=()):
    return SimpleNamespace(tracker=_Tracker(list(running)), run_id="parent", run_key="k")


def test_an_error_ends_the_run_failed_and_an_interrupt_killed():
    ctx = _ctx()
    with pytest.raises(ValueError), run_guard(ctx):
        raise ValueError("boom")
    assert ctx.tracker.ends == [("parent", "FAILED")]
    assert ctx.tracker.tags["twinkle.error"] == "ValueError: boom"
    ctx = _ctx()
    with pytest.raises(KeyboardInterrupt), run_guard(ctx):
        raise KeyboardInterrupt
    assert ctx.tracker.ends == [("parent", "KILLED")]


def test_stale_stage_runs_of_the_key_are_closed_on_entry():
    ctx = _ctx(running=["old-stage"])
    with run_guard(ctx):
        pass
    assert ctx.tracker.client.ended == {"old-stage": "KILLED"} and ctx.tracker.ends == []


def test_each_run_has_its_folder_and_latest_points_at_the_newest(tmp_path):
    first, second = run_folder(tmp_path, "run-a"), run_folder(tmp_path, "run-b")
    point_latest(tmp_path, first)
    point_latest(tmp_path, second)
    assert (tmp_path / "latest").resolve() == second.resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "run-a", "run-b"]


def test_mlflow_run_urls():
    assert (
        mlflow_run_url("http://mlflow:5000/", "3", "r")
        == "http://mlflow:5000/#/experiments/3/runs/r"
    )
    assert mlflow_run_url("sqlite:////x/mlflow.db", "3", "r").endswith("/#/experiments/3/runs/r")


def test_runs_whose_process_died_are_closed_and_live_ones_are_not(tmp_path):
    """A ``kill -9`` leaves no chance to close the run: the next run on the host closes it,
    with its stage runs, and leaves alone a run whose process is still alive."""
    import subprocess
    import sys

    from flows.lifecycle import owner_token
    from twinkle.tracking import MLflowTracker

    tracker = MLflowTracker(f"sqlite:///{tmp_path}/m.db", "orphans", str(tmp_path / "art"))
    client = tracker.client
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_token = owner_token(dead.pid)
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:

        def run(key, owner):
            r = client.create_run(tracker.experiment_id, tags={"twinkle.run_key": key})
            client.set_tag(r.info.run_id, "twinkle.owner", owner)
            stage = client.create_run(
                tracker.experiment_id, tags={"twinkle.run_key": f"{key}#stage"}
            )
            return r.info.run_id, stage.info.run_id

        orphan, orphan_stage = run("dead-key", dead_token)
        live, live_stage = run("live-key", owner_token(alive.pid))
        me = client.create_run(tracker.experiment_id, tags={"twinkle.run_key": "mine"})
        ctx = SimpleNamespace(tracker=tracker, run_id=me.info.run_id, run_key="mine")
        with run_guard(ctx):
            pass
        runs = (orphan, orphan_stage, live, live_stage)
        status = {r: client.get_run(r).info.status for r in runs}
        assert status == {
            orphan: "KILLED",
            orphan_stage: "KILLED",
            live: "RUNNING",
            live_stage: "RUNNING",
        }
        assert "ended mid-run" in client.get_run(orphan).data.tags["twinkle.error"]
        assert client.get_run(me.info.run_id).data.tags["twinkle.owner"] == owner_token()
    finally:
        alive.kill()
        alive.wait()


@pytest.mark.parametrize(
    ("api_url", "temporary", "heartbeats"),
    [
        (None, None, False),  # `twinkle run`'s own temporary API
        ("http://127.0.0.1:4200/api", None, True),  # a lasting server watches them
        ("http://127.0.0.1:4200/api", True, False),  # a test harness's API, said to be one
    ],
)
def test_flow_runs_on_a_temporary_api_send_no_heartbeats(api_url, temporary, heartbeats):
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from flows.lifecycle import temporary_api_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        before = get_current_settings().flows.heartbeat_frequency
        with temporary_api_settings(temporary):
            inside = get_current_settings().flows.heartbeat_frequency
        assert get_current_settings().flows.heartbeat_frequency == before == 180
    assert (inside is not None) is heartbeats
