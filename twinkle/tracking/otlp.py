"""Traces sent to an MLflow tracking server through its OTLP endpoint (``/v1/traces``).

With an ``http(s)://`` tracking URI, MLflow's default export stores each trace twice over:
its spans through the server's OTLP endpoint, then its trace info through ``start_trace``,
which finds the row the spans created and merges every tag and metadata row into it one by
one (about two thirds of the server's work per trace). MLflow documents a second way in:
its tracer exports to any OpenTelemetry collector named by the standard
``OTEL_EXPORTER_OTLP_TRACES_*`` settings, and an MLflow server is one (the experiment in the
``x-mlflow-experiment-id`` header). The server then stores each trace once, from its spans:
the session from the root span's ``session.id`` attribute (OpenTelemetry's semantic
convention), the tags from its ``mlflow.traceTag.<name>`` attributes. The run link, which
the spans cannot carry, is made with ``MlflowClient.link_traces_to_run``.

This module holds what that needs, all public: the exporter settings
(``opentelemetry-exporter-otlp-proto-http``, the exporter MLflow loads), applied with
``mlflow.tracing.reset()`` so MLflow's tracer is rebuilt on them; ``flush()``, which waits
for the export through the OpenTelemetry ``TracerProvider.force_flush`` of
``mlflow.tracing.get_bridged_tracer_provider()``; and ``transport_for(uri)``.

``TWINKLE_TRACE_TRANSPORT``: ``store`` (the default: MLflow's default export) or ``otlp``
(for an ``http(s)`` tracking URI; a ``sqlite:`` store has no server). An opt-in, because
with MLflow 3.17 the server reads what the OpenTelemetry exporter sends a little differently
from what MLflow's own export sends: whole-number span attributes come back as text, and a
span's type is stored JSON-quoted, so a ``span.type = 'LLM'`` search finds nothing (the
trace view shows the types right). The cost: about a third of the server's work per trace.

Example:
    >>> transport_for("sqlite:////tmp/mlflow.db"), transport_for("http://127.0.0.1:5000")
    ('store', 'store')
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["OTLP", "STORE", "TRACE_TAG", "flush", "transport_for", "use_endpoint"]

OTLP, STORE = "otlp", "store"
#: Root span attribute prefix the server turns into trace tags (its OTLP ingestion).
TRACE_TAG = "mlflow.traceTag."
_SETTINGS = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_BSP_MAX_QUEUE_SIZE",
)
_LOCK = threading.Lock()
#: (endpoint, experiment) MLflow's tracer exports to now; None: MLflow's default export.
_CURRENT: list[tuple[str, str] | None] = [None]
_SAVED: dict[str, str | None] = {}


def transport_for(tracking_uri: str) -> str:
    """``otlp`` for an MLflow server (``http(s)://``) when ``TWINKLE_TRACE_TRANSPORT`` says
    so; else ``store``."""
    wanted = os.environ.get("TWINKLE_TRACE_TRANSPORT", "").strip().lower() or STORE
    if wanted not in (OTLP, STORE):
        raise ValueError(f"TWINKLE_TRACE_TRANSPORT must be 'otlp' or 'store', got {wanted!r}")
    return wanted if tracking_uri.startswith(("http://", "https://")) else STORE


def use_endpoint(tracking_uri: str | None, experiment_id: str | None = None) -> None:
    """Point MLflow's tracer at the OTLP endpoint of the server ``tracking_uri`` for
    ``experiment_id``, or back at MLflow's default export (``None``). The settings are
    process-wide: the caller holds the one-batch-at-a-time trace lock."""
    import mlflow

    target = None if tracking_uri is None else (tracking_uri.rstrip("/"), str(experiment_id))
    with _LOCK:
        if target == _CURRENT[0]:
            return
        if target is None:
            for name, value in _SAVED.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            _SAVED.clear()
        else:
            if not _SAVED:
                _SAVED.update({name: os.environ.get(name) for name in _SETTINGS})
            os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{target[0]}/v1/traces"
            os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
            os.environ["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] = f"x-mlflow-experiment-id={target[1]}"
            # A batch is flushed whole: room for the largest (the default, 2,048 spans, would
            # drop spans of a batch of 32 traces at 64 spans each).
            os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = "65536"
        _CURRENT[0] = target
        mlflow.tracing.reset()  # the tracer is rebuilt on the settings with the next span


def flush(timeout_s: float = 120.0) -> bool:
    """Wait until every ended span is exported (True), or ``timeout_s`` passed (False)."""
    import mlflow

    provider: Any = mlflow.tracing.get_bridged_tracer_provider()
    return bool(provider.force_flush(int(timeout_s * 1000)))
