"""MLflow tracking for twinkle flows: runs and stages, metrics, plots, traces, secret scrubbing.

MLflow itself is imported only inside the functions that talk to it, so importing
``twinkle.tracking`` stays cheap and works without a tracking server.

Example:
    >>> from twinkle.tracking import redact
    >>> redact({'api_key': 'sk-live-123456', 'base_url': 'http://me:pw1234@host/v1'})
    {'api_key': '[REDACTED]', 'base_url': 'http://me:[REDACTED]@host/v1'}
"""

from twinkle.tracking.scrub import REDACTED, is_secret_name, redact, scrub_secrets, scrub_text
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
    "redact",
    "sampled",
    "scrub_secrets",
    "scrub_text",
    "trajectory_key",
]
