"""Nothing private reaches MLflow or Prefect: secrets and personal data planted in every field of
the input rows are searched for, byte by byte, in the MLflow store (the SQLite database), its
artifact folder and the Prefect database (parameters, logs, artifacts such as the
``rollout-rewards`` table) after a pipeline run with the PII step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flows.conftest import conversation
from tests.flows.tests_flows_helpers import flow_state, mlflow_client, prefect_db_files
from tests.tracking.privacy_run import run_planted

pytestmark = pytest.mark.slow

API_KEY = "sk-ant-api03-Zq7Xv9Lm2Np4Rt6Yw8Ab"
PHONE = "+1 415 555 2671"
ID_EMAIL = "alice.planted@example.com"
FIELD_EMAIL = "bob.planted@example.org"
MESSAGE_EMAIL = "carol.planted@example.net"
#: What must not be found, each as the bytes a store would hold.
PLANTED = [API_KEY, PHONE, ID_EMAIL, FIELD_EMAIL, MESSAGE_EMAIL, "alice.planted"]


def _rows() -> list[dict]:
    rows = []
    for i in range(3):
        row = conversation(i, email=MESSAGE_EMAIL)
        row["messages"][1]["content"] += f" Call me on {PHONE}; my key is {API_KEY}."
        row["id"] = ID_EMAIL if i == 0 else f"conv-{i}"
        row["customer_email"] = FIELD_EMAIL
        row["metadata"] = {"phone": PHONE, "api_key": API_KEY, "note": f"mail {FIELD_EMAIL}"}
        rows.append(row)
    rows.append(json.loads(json.dumps(rows[0])))  # a duplicate: dropped raw, before the rewrite
    return rows


def _stored_bytes(tmp_path: Path) -> dict[str, bytes]:
    """Every file of the MLflow store: the database (and its journals) and the artifacts."""
    files = {p: p.read_bytes() for p in tmp_path.glob("mlflow.db*")}
    files.update({p: p.read_bytes() for p in (tmp_path / "mlruns").rglob("*") if p.is_file()})
    return {str(p): data for p, data in files.items()}


def test_planted_secrets_and_pii_never_reach_the_mlflow_store(prefect_api, tmp_path):
    state, tracking = run_planted(tmp_path, _rows())
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["pii"] == "ran" and summary["trajectories"] == 3

    stored = _stored_bytes(tmp_path)
    stored.update({p: Path(p).read_bytes() for p in prefect_db_files()})
    assert any(p.endswith(".dropped.jsonl") for p in stored)  # the rewritten log was uploaded
    found = {
        secret: sorted(p for p, data in stored.items() if secret.encode() in data)
        for secret in PLANTED
    }
    assert {k: v for k, v in found.items() if v} == {}

    # What must stay readable does: the URL without its password, a variable's name.
    client, exp = mlflow_client(tracking)
    parent = next(r for r in client.search_runs([exp]) if "mlflow.parentRunId" not in r.data.tags)
    params = parent.data.params
    assert params["rollout.openenv_base_url"] == "http://127.0.0.1:9/"
    assert "E2B_API_KEY" in params["rollout.sandbox.api_key_env"]
    # The MLflow run is the flow run's: its name, id and UI address.
    flow_run_id = str(state.state_details.flow_run_id)
    assert parent.data.tags["prefect.flow_run_id"] == flow_run_id
    assert parent.info.run_name == parent.data.tags["prefect.flow_run_name"]
    assert parent.data.tags["prefect.flow_run_url"].endswith(f"/runs/flow-run/{flow_run_id}")
    # Datasets are run inputs, with their source and digest.
    contexts = {
        tag.value
        for d in parent.inputs.dataset_inputs
        for tag in d.tags
        if tag.key == "mlflow.data.context"
    }
    assert contexts == {"input", "curated"}
    assert all(d.dataset.digest and d.dataset.source for d in parent.inputs.dataset_inputs)


def test_the_pii_step_rewrites_every_field_when_asked():
    from twinkle.preprocessor.pii_presidio_filter import PIIPresidioFilter

    row = _rows()[0]
    kept, dropped = PIIPresidioFilter(all_fields=True)([row])
    assert dropped == [] and kept[0]["id"] != ID_EMAIL
    text = json.dumps(kept[0])
    assert [s for s in PLANTED if s in text] == []
    assert kept[0]["messages"][0] == row["messages"][0]  # the system prompt holds no PII
    only_messages, _ = PIIPresidioFilter()([row])
    assert only_messages[0]["customer_email"] == FIELD_EMAIL  # the default: messages only
