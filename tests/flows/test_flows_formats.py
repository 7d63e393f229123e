"""The curation flow reads the formats datasets come in: a folder of ShareGPT and Alpaca
files, converted per row, with IntentClassifier's tag counts in the Prefect artifact and in
MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flows.tests_flows_helpers import flow_state, mlflow_client

pytestmark = pytest.mark.slow

SHAREGPT = {
    "id": "sg-1",
    "conversations": [
        {"from": "human", "value": "What's the weather in Paris right now?"},
        {
            "from": "function_call",
            "value": '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        },
        {"from": "observation", "value": '{"temp_c": 18, "sky": "cloudy"}'},
        {"from": "gpt", "value": "It is 18 °C and cloudy in Paris at the moment."},
    ],
    "tools": '[{"name": "get_weather", "parameters": {"type": "object"}}]',
}
ALPACA = {
    "id": "al-1",
    "instruction": "Write a Python function that reverses a string.",
    "input": "",
    "output": "def reverse(s: str) -> str:\n    return s[::-1]\n\nIt slices with a step of -1.",
}


def test_a_folder_of_sharegpt_and_alpaca_is_curated_with_intent_tags(
    prefect_api, tmp_path: Path, tracking_params
):
    from prefect.client.orchestration import get_client

    from flows.curation import curation_flow
    from flows.params import CurationParams, RunParams

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text(json.dumps(SHAREGPT) + "\n")
    (data / "b.jsonl").write_text(json.dumps(ALPACA) + "\n")
    params = CurationParams(inputs=[str(data)], pii="off", filters=["intent", "hard", "normalize"])
    state = curation_flow(
        params, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
    )
    assert flow_state(state) == "COMPLETED"
    result = state.result()
    assert (result["rows_in"], result["rows_out"]) == (2, 2)

    rows = {
        json.loads(line)["id"]: json.loads(line)
        for line in Path(result["curated_path"]).read_text().splitlines()
    }
    call = rows["sg-1"]["messages"][1]
    assert (
        call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "get_weather"
    )
    assert rows["sg-1"]["messages"][2]["tool_call_id"] == call["tool_calls"][0]["id"]
    assert rows["al-1"]["messages"][0] == {"role": "user", "content": ALPACA["instruction"]}

    with get_client(sync_client=True) as client:
        art = client.read_latest_artifacts()
    summary = next(a for a in art if a.key == "curation-summary")
    assert "tool_call=1" in str(summary.data) and "code=1" in str(summary.data)

    client, exp = mlflow_client(tracking_params)
    runs = client.search_runs([exp], "tags.mlflow.runName = 'curation'")
    metrics = runs[0].data.metrics if runs else {}
    tagged = {k.rsplit(".", 1)[-1]: v for k, v in metrics.items() if k.startswith("tags.")}
    assert tagged.get("tool_call") == 1 and tagged.get("code") == 1, metrics
