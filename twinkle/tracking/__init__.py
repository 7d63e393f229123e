"""MLflow tracking for twinkle flows: runs and stages, metrics, plots, traces, secret scrubbing.

MLflow itself is imported only inside the functions that talk to it, so importing
``twinkle.tracking`` stays cheap and works without a tracking server.

Example:
    >>> from twinkle.tracking import scrub_secrets
    >>> scrub_secrets({'api_key': 'sk-live-123456'})
    {'api_key': '[REDACTED]'}
"""

from twinkle.tracking.scrub import REDACTED, is_secret_name, scrub_secrets, scrub_text
from twinkle.tracking.traces import (
    SpanRecord,
    TraceReport,
    TraceWriter,
    build_spans,
    sampled,
    trajectory_key,
)
from twinkle.tracking.tracker import MLflowTracker, flatten, metric_key
from twinkle.tracking.writer import TraceStream, TraceWriterProcess

__all__ = [
    "REDACTED",
    "MLflowTracker",
    "SpanRecord",
    "TraceReport",
    "TraceStream",
    "TraceWriter",
    "TraceWriterProcess",
    "build_spans",
    "flatten",
    "is_secret_name",
    "metric_key",
    "sampled",
    "scrub_secrets",
    "scrub_text",
    "trajectory_key",
]
