"""Fixtures for the flow tests: small recorded conversations whose tool calls reproduce in the
local sandbox, and MLflow settings in a temporary directory (the real Prefect API, fixture
``prefect_api``, is in tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def conversation(i: int, email: str | None = None) -> dict:
    """A recorded agent conversation whose tool results the local sandbox reproduces exactly."""
    ask = f"Write the number {i * 7} to value.txt, then print it with a shell command."
    if email:
        ask += f" Send the result to {email} afterwards."
    write = {"path": "value.txt", "content": str(i * 7)}
    return {
        "id": f"conv-{i}",
        "messages": [
            {
                "role": "system",
                "content": "You are a careful shell agent working in a Linux sandbox.",
            },
            {"role": "user", "content": ask},
            {
                "role": "assistant",
                "content": "I will write the file first.",
                "tool_calls": [
                    {
                        "id": f"c{i}-w",
                        "type": "function",
                        "function": {"name": "write_file", "arguments": json.dumps(write)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}-w", "content": "File written: value.txt"},
            {
                "role": "assistant",
                "content": "Now I print it back to check.",
                "tool_calls": [
                    {
                        "id": f"c{i}-r",
                        "type": "function",
                        "function": {
                            "name": "run_command",
                            "arguments": json.dumps({"command": "cat value.txt"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}-r", "content": str(i * 7)},
            {
                "role": "assistant",
                "content": f"The file value.txt now holds {i * 7}, as the command output confirms.",
            },
        ],
    }


@pytest.fixture
def conversations_file(tmp_path: Path) -> str:
    rows = [conversation(i) for i in range(4)]
    rows.append(rows[0])  # an exact duplicate, for the dedup step
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def tracking_params(tmp_path: Path):
    from flows.params import TrackingParams

    return TrackingParams(
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        artifact_location=str(tmp_path / "mlruns"),
    )
