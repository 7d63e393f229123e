"""``limit``: a rollout takes the first ``limit`` conversations with tool calls and reads no
further; the rows after them are counted (and named in the summary), not decoded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flows.conftest import conversation
from tests.flows.tests_flows_helpers import flow_state


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_take_rows_stops_at_the_limit_and_counts_the_rest(tmp_path):
    from flows.common import remember_rows, take_rows
    from twinkle.io import DatasetFormatError

    rows = [{"n": n} for n in range(6)]
    # A broken line past the limit is never decoded, so it cannot fail the read.
    path = _write(tmp_path / "rows.jsonl", [json.dumps(r) for r in rows] + ["{broken"])
    odd = lambda r: r["n"] % 2 == 1  # noqa: E731
    assert take_rows([path], odd, 2) == ([{"n": 1}, {"n": 3}], 4, 3)
    assert take_rows([path], odd, 1) == ([{"n": 1}], 2, 5)
    with pytest.raises(DatasetFormatError, match="rows.jsonl:7: invalid JSON"):  # no limit
        take_rows([path], odd, None)
    good = _write(tmp_path / "good.jsonl", [json.dumps(r) for r in rows])
    assert take_rows([good], odd, None) == ([{"n": 1}, {"n": 3}, {"n": 5}], 6, 0)
    assert take_rows([good], odd, 3) == ([{"n": 1}, {"n": 3}, {"n": 5}], 6, 0)  # none left
    remember_rows(good, rows[:2])  # remembered rows stand for the file's (same size, mtime)
    assert take_rows([good], odd, 5) == ([{"n": 1}], 2, 0)
    # Across files: the count of the rest spans them all.
    assert take_rows([path, good], odd, 1) == ([{"n": 1}], 2, 11)


@pytest.mark.slow
def test_a_rollout_limit_takes_the_first_conversations_and_reads_no_further(
    prefect_api, tmp_path, tracking_params
):
    from flows.params import RolloutParams, RunParams
    from flows.rollout import rollout_flow

    no_tools = {"id": "chat", "messages": [{"role": "user", "content": "hi"}]}
    lines = [json.dumps(no_tools)] + [json.dumps(conversation(i)) for i in range(4)]
    src = _write(tmp_path / "conv.jsonl", [*lines, "{not json"])
    rollout = RolloutParams(conversations=[src], tasks=[], limit=2, concurrency=2)
    state = rollout_flow(
        rollout, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
    )
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 2 and summary["failed"] == 0
    scored = [json.loads(x) for x in Path(summary["scored_path"]).read_text().splitlines()]
    assert sorted(t["id"] for t in scored) == ["conv-0", "conv-1"]
    assert summary["skipped"] == {
        "conversations": "1 rows without tool calls are not re-run",
        "limit": "3 rows after the first 2 conversations not read",
    }
