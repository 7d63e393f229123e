"""flows.progress: stage progress pushed to a callback (the CLI bar) and to a Prefect progress
artifact."""

from __future__ import annotations

import pytest

from flows.progress import StageProgress


def test_the_callback_sees_every_count_up_to_the_total_and_a_broken_one_is_ignored():
    seen: list[tuple[str, int, int]] = []
    progress = StageProgress(
        "rollout", total=5, artifact=False, interval_s=0.01, callback=lambda *a: seen.append(a)
    )
    for _ in range(5):
        progress.advance()
    progress.close()

    def broken(stage, done, total):
        raise RuntimeError("terminal gone")

    progress = StageProgress("rollout", total=1, artifact=False, interval_s=0.01, callback=broken)
    progress.advance()
    progress.close()  # no exception: a broken bar never stops the stage
    counts = [done for _, done, _ in seen]
    assert seen[0] == ("rollout", 0, 5)  # shown as the stage starts, before anything finished
    assert (
        seen[-1] == ("rollout", 5, 5)
        and counts == sorted(counts)
        and len(set(counts)) == len(counts)
    )


@pytest.mark.slow
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

    with _progress_bar(enabled=True) as show:
        progress = StageProgress("rollout", total=2, artifact=False, interval_s=0.01, callback=show)
        progress.advance(2)
        progress.close()
    err = capsys.readouterr().err
    assert "rollout" in err and "2/2" in err
    assert not hasattr(StageProgress, "listeners")  # a callback per run, no global list
