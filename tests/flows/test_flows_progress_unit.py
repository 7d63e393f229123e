"""flows.progress: stage progress pushed to listeners (the CLI bar) and to a Prefect progress
artifact."""

from __future__ import annotations

from flows.progress import StageProgress


def test_listeners_see_every_count_up_to_the_total_and_a_broken_listener_is_ignored():
    seen: list[tuple[str, int, int]] = []

    def broken(stage, done, total):
        raise RuntimeError("terminal gone")

    StageProgress.listeners[:] = [broken, lambda *a: seen.append(a)]
    try:
        progress = StageProgress("rollout", total=5, artifact=False, interval_s=0.01)
        for _ in range(5):
            progress.advance()
        progress.close()
    finally:
        StageProgress.listeners.clear()
    counts = [done for _, done, _ in seen]
    assert seen[0] == ("rollout", 0, 5)  # shown as the stage starts, before anything finished
    assert (
        seen[-1] == ("rollout", 5, 5)
        and counts == sorted(counts)
        and len(set(counts)) == len(counts)
    )


def test_progress_artifact_in_a_flow_run_reaches_100_percent(prefect_api):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterType,
    )

    @flow
    def counting() -> None:
        progress = StageProgress("rollout", total=3, interval_s=0.01)
        progress.advance(2)
        progress.advance()
        progress.close()

    state = counting(return_state=True)
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),
                type=ArtifactFilterType(any_=["progress"]),
            )
        )
    assert [(a.data, a.description) for a in found] == [(100.0, "rollout: 3/3 finished")]


def test_twinkle_run_bar_draws_stage_progress(capsys):
    from twinkle.cli.run import _progress_bar

    with _progress_bar(enabled=True):
        progress = StageProgress("rollout", total=2, artifact=False, interval_s=0.01)
        progress.advance(2)
        progress.close()
    err = capsys.readouterr().err
    assert "rollout" in err and "2/2" in err
    assert StageProgress.listeners == []  # the bar unregisters itself
