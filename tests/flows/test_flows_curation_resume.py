"""The curation chain the flows run (dedup, the default filters, the PII rewrite of every
field) describes itself the same way in every process, so a killed ``twinkle run`` finds its
finished shards when the next process resumes it (string hashing changes a set's order, and
so its text, from one process to the next)."""

from __future__ import annotations

import os
import subprocess
import sys

_SCRIPT = """
from flows.params import DEFAULT_FILTERS
from twinkle.preprocessor.chain import build_pipeline
from twinkle.preprocessor.stream import _settings_of

for stage in build_pipeline(["dedup", *DEFAULT_FILTERS, "pii"], {"pii": {"all_fields": True}}):
    print(stage.name, _settings_of(stage.step))
"""


def _describe(seed: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env={**os.environ, "PYTHONHASHSEED": seed},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_flow_chain_reads_the_same_in_every_process():
    first = _describe("1")
    assert "PIIPresidioFilter" in first and "'tool'" in first  # the PII step and its role set
    assert _describe("2") == first
