"""The PII step is available to `twinkle curate --filters ...,pii` through the shared chain."""

import pytest

from twinkle.preprocessor.chain import build_pipeline, curate_rows

pytestmark = pytest.mark.slow


def test_pii_step_runs_in_the_chain_and_rewrites_emails():
    row = {
        "id": "r1",
        "messages": [
            {
                "role": "user",
                "content": "Please email the report to jane.doe@example.com by Friday, thanks.",
            },
            {
                "role": "assistant",
                "content": "Sure. I will attach the full quarterly report, including the revenue "
                "tables and the hiring summary, and send it to that address today.",
            },
        ],
    }
    kept, stats = curate_rows([row], build_pipeline(["hard", "pii"]))
    assert len(kept) == 1 and "jane.doe@example.com" not in kept[0]["messages"][0]["content"]
    assert [s["step"] for s in stats.as_dict()["steps"]] == ["HardFilter", "PIIPresidioFilter"]
