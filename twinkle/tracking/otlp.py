"""Traces sent to an MLflow tracking server through its OTLP endpoint (``/v1/traces``).

MLflow's server ingests OpenTelemetry traces (its documented OTLP ingestion: protobuf
``ExportTraceServiceRequest`` bodies, the experiment in the ``x-mlflow-experiment-id``
header, the run in ``x-mlflow-run-id``) and stores each trace once, from its spans, in one
``log_spans`` call per request: the session from the root span's ``session.id`` attribute
(OpenTelemetry's semantic convention), the tags from its ``mlflow.traceTag.<name>``
attributes, the run link from the header. MLflow's own client export instead stores spans
and then merges the trace info into the row they made, tag by tag, which is about two
thirds of the server's work per trace; and a request answered 200 is stored, so no
look-up is needed before feedback is attached.

The request is built here from twinkle's span records with ``opentelemetry-proto`` (the
message types MLflow's server parses; no tracer, so nothing process-global) and posted with
``httpx``. Each attribute goes as its raw OpenTelemetry value (text, number, list, key-value
list), which the server JSON-encodes once, as MLflow's own spans store it: span types,
numbers and payloads read back exactly as written.

``TWINKLE_TRACE_TRANSPORT``: ``otlp`` (the default for an ``http(s)://`` tracking URI) or
``store`` (MLflow's client export; the only way into a ``sqlite:`` store, which has no
server). A server that has no OTLP endpoint (older than MLflow 3, or over a file store)
answers 404/405/501: ``OTLPUnsupported``, and the writer falls back to ``store``.

Example:
    >>> transport_for("sqlite:////tmp/mlflow.db"), transport_for("http://127.0.0.1:5000")
    ('store', 'otlp')
    >>> body, ids = encode([([SpanRecord("t", "AGENT", None, 1, 2)], {"session.id": "s"})])
    >>> len(ids), ids[0].startswith("tr-")
    (1, True)
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from twinkle.errors import TrackingError
from twinkle.tracking.scrub import scrub_text
from twinkle.tracking.spans import SpanRecord

__all__ = [
    "OTLP",
    "STORE",
    "TRACE_TAG",
    "OTLPTooLarge",
    "OTLPUnsupported",
    "encode",
    "send",
    "transport_for",
]

OTLP, STORE = "otlp", "store"
#: Root span attribute prefix the server turns into trace tags (its OTLP ingestion).
TRACE_TAG = "mlflow.traceTag."
#: What MLflow's spans call their type, inputs and outputs (its span attribute keys).
SPAN_TYPE, SPAN_INPUTS, SPAN_OUTPUTS = "mlflow.spanType", "mlflow.spanInputs", "mlflow.spanOutputs"
#: Also on every span MLflow's client exports: its start in ns, and its level (the UI's span
#: filter), which MLflow resolves to INFO (20) for the AGENT, LLM and TOOL spans twinkle makes.
START_TIME_NS, LOG_LEVEL, INFO = "mlflow.spanStartTimeNs", "mlflow.spanLogLevel", 20
_INT64 = 2**63


class OTLPUnsupported(TrackingError):
    """The server has no OTLP trace endpoint (HTTP 404, 405 or 501)."""


class OTLPTooLarge(TrackingError):
    """The server (or a proxy before it) refused the request's size (HTTP 413)."""


def transport_for(tracking_uri: str) -> str:
    """``otlp`` for an MLflow server (``http(s)://``) unless ``TWINKLE_TRACE_TRANSPORT`` is
    ``store``; ``store`` for anything else."""
    wanted = os.environ.get("TWINKLE_TRACE_TRANSPORT", "").strip().lower() or OTLP
    if wanted not in (OTLP, STORE):
        raise ValueError(f"TWINKLE_TRACE_TRANSPORT must be 'otlp' or 'store', got {wanted!r}")
    return wanted if tracking_uri.startswith(("http://", "https://")) else STORE


def encode(
    traces: Sequence[tuple[Sequence[SpanRecord], Mapping[str, Any]]],
    identities: Sequence[str] | None = None,
) -> tuple[bytes, list[str]]:
    """One ``ExportTraceServiceRequest`` for ``traces``: each is its span records (root
    first, ``parent`` an index into them) and extra root attributes (tags, session).
    Returns the serialized request and the MLflow trace id of each trace.

    ``identities``: a text per trace that its trace and span ids are derived from (BLAKE2),
    so sending the same trace again, even re-encoded, overwrites it rather than adding a
    second one; without, the ids are random."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    _put(resource_spans.resource.attributes.add(), "service.name", "twinkle")
    scope = resource_spans.scope_spans.add()
    scope.scope.name = "twinkle.tracking"
    trace_ids = []
    for n, (records, root_attributes) in enumerate(traces):
        seed = identities[n].encode() if identities is not None else os.urandom(16)
        trace_id = hashlib.blake2b(seed, digest_size=16, person=b"twinkle-trace").digest()
        span_ids = [
            hashlib.blake2b(
                seed, digest_size=8, person=b"twinkle-span", salt=k.to_bytes(8, "big")
            ).digest()
            for k in range(len(records))
        ]
        for k, rec in enumerate(records):
            span = scope.spans.add()
            span.trace_id, span.span_id, span.name = trace_id, span_ids[k], rec.name
            if rec.parent is not None:
                span.parent_span_id = span_ids[rec.parent]
            span.kind = Span.SPAN_KIND_INTERNAL
            span.start_time_unix_nano, span.end_time_unix_nano = rec.start_ns, rec.end_ns
            if rec.error:
                span.status.code = Status.STATUS_CODE_ERROR
                span.status.message = rec.error
            else:
                span.status.code = Status.STATUS_CODE_OK
            _put(span.attributes.add(), SPAN_TYPE, rec.span_type)
            _put(span.attributes.add(), START_TIME_NS, rec.start_ns)
            _put(span.attributes.add(), LOG_LEVEL, INFO)
            if rec.inputs is not None:
                _put(span.attributes.add(), SPAN_INPUTS, rec.inputs)
            if rec.outputs is not None:
                _put(span.attributes.add(), SPAN_OUTPUTS, rec.outputs)
            extra = root_attributes if k == 0 else {}
            for key, value in {**rec.attributes, **extra}.items():
                _put(span.attributes.add(), key, value)
        trace_ids.append(f"tr-{trace_id.hex()}")
    return request.SerializeToString(), trace_ids


def _put(kv: Any, key: str, value: Any) -> None:
    kv.key = str(key)
    _value(kv.value, value)


def _value(out: Any, value: Any) -> None:
    """``value`` as an OpenTelemetry ``AnyValue`` (None stays empty: the server reads null)."""
    if value is None:
        return
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int) and -_INT64 <= value < _INT64:
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, Mapping):
        kvlist = out.kvlist_value
        kvlist.SetInParent()  # an empty mapping is still a mapping
        for k, v in value.items():
            _put(kvlist.values.add(), k, v)
    elif isinstance(value, (list, tuple)):
        array = out.array_value
        array.SetInParent()
        for v in value:
            _value(array.values.add(), v)
    else:  # what JSON has no type for (a huge int, a date...) goes as its text
        out.string_value = str(value)


def send(
    tracking_uri: str,
    experiment_id: str,
    body: bytes,
    *,
    run_id: str | None = None,
    timeout_s: float = 120.0,
    attempts: int = 3,
) -> None:
    """Post one encoded request to the server's ``/v1/traces``; returns once it is stored.

    The server stores a request whole or not at all, so a failed one is sent again (a
    connection error, 429 or 5xx; ``attempts`` in all, 0.5 s then 1 s apart). Raises
    ``OTLPUnsupported`` for a server without the endpoint, ``OTLPTooLarge`` for a request
    too large for it (send less at a time), ``TrackingError`` naming the server (credentials
    hidden) and its answer otherwise.
    """
    import httpx

    url = tracking_uri.rstrip("/") + "/v1/traces"
    headers = {"Content-Type": "application/x-protobuf", "x-mlflow-experiment-id": experiment_id}
    if run_id:
        headers["x-mlflow-run-id"] = run_id
    # MLflow's own client settings for a server that asks for credentials.
    auth: Any = None
    if token := os.environ.get("MLFLOW_TRACKING_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    elif (user := os.environ.get("MLFLOW_TRACKING_USERNAME")) is not None:
        auth = (user, os.environ.get("MLFLOW_TRACKING_PASSWORD", ""))
    where = scrub_text(url)
    problem = ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(0.5 * attempt)
        try:
            reply = httpx.post(url, content=body, headers=headers, auth=auth, timeout=timeout_s)
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            continue
        if reply.status_code == 200:
            return
        problem = f"HTTP {reply.status_code}: {reply.text[:300]}"
        if reply.status_code in (404, 405, 501):
            raise OTLPUnsupported(f"{where} has no OTLP trace endpoint ({problem})")
        if reply.status_code == 413:
            raise OTLPTooLarge(f"{where} refused {len(body)} bytes ({problem})")
        if reply.status_code != 429 and reply.status_code < 500:
            break  # the request itself is wrong: sending it again changes nothing
    raise TrackingError(
        f"the MLflow server did not store the traces sent to {where} ({scrub_text(problem)}); "
        "check its log, or set TWINKLE_TRACE_TRANSPORT=store"
    )
