"""Bulk writing of MLflow traces on a SQL tracking store: one transaction per batch.

MLflow's ``SqlAlchemyStore.start_trace`` writes one trace record per transaction and looks
the experiment up again for each (measured here: 8.8 ms of CPU per trace on SQLite, 2
cores, of which ~2.5 ms is the experiment lookup and ~2 ms the commit), and ``log_spans``
re-derives trace aggregates, re-locks the traces and compiles a new multi-row ``INSERT``
for each call (~2 ms per trace). A rollout of 500 trajectories spent more CPU writing traces
than replaying them. MLflow has no public bulk call, so ``write_traces`` writes what
``start_trace`` followed by ``log_spans`` leave in the store, for a whole batch, in one
transaction: MLflow's own ORM models and helpers for the trace records (trace info with its
promoted analytics columns, tags plus the artifact-location tag, metadata with the "info
finalized" marker, assessments, rollup invalidation), and the span rows ``log_spans`` builds
(content from MLflow's ``translate_span_when_storing``, token usage rolled up into the
trace's columns by MLflow's aggregator, the DB payload generation advanced) inserted with one
cached ``executemany``. With it ``TraceWriter`` takes 2.4-3.2 ms of CPU per trace, spans built
and stored, against 7.6-11.8 ms through ``start_trace`` + ``log_spans`` (``bench/pipeline.py``,
part ``trace_write``).

Safety: ``tests/flows/test_tracking_bulk.py`` writes the same traces both ways and compares
what the public read API returns. Whatever this module does not reproduce goes through
MLflow's own calls (``start_trace`` per trace, then ``log_spans``): a store that is not SQL,
a helper missing (the module moved), spans carrying what only ``log_spans`` derives (costs,
sessions, users, trace tags, OTel resources), or a trace of the batch already stored
(another writer got there first: the transaction is rolled back and MLflow merges). MLflow
is pinned ``<3.18`` in ``pyproject.toml`` for this reason.

Example:
    >>> from mlflow import MlflowClient                                    # doctest: +SKIP
    >>> store = MlflowClient('sqlite:////tmp/m.db')._tracking_client.store   # doctest: +SKIP
    >>> write_traces(store, '1', [(trace_info, spans)])                    # doctest: +SKIP
    'bulk'
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger("twinkle.tracking")

#: Span attributes from which ``log_spans`` derives trace data this module does not write.
_DERIVED = ("mlflow.llm.cost", "session.id", "gen_ai.conversation.id", "user.id")


def _info_row(store: Any, experiment: Any, info: Any, h: Any) -> Any:
    """The ``SqlTraceInfo`` (with its child rows) that ``start_trace`` would add for ``info``."""
    trace_id = info.trace_id
    metadata = dict(info.trace_metadata.items())
    row = h.SqlTraceInfo(
        request_id=trace_id,
        experiment_id=info.experiment_id,
        timestamp_ms=info.request_time,
        execution_time_ms=info.execution_duration,
        status=info.state.value,
        client_request_id=info.client_request_id,
        request_preview=info.request_preview,
        response_preview=info.response_preview,
        trace_name=h.validate_trace_name(info.tags.get(h.TraceTagKey.TRACE_NAME)),
        **h.analytics_columns_from_metadata(metadata),
    )
    row.tags = [
        h.SqlTraceTag(request_id=trace_id, key=k, value=v)
        for k, v in info.tags.items()
        if k != h.TraceTagKey.TRACE_NAME
    ] + [store._get_trace_artifact_location_tag(experiment, trace_id)]
    for key in h.PROMOTED_TRACE_METADATA_KEYS:  # kept in columns, not metadata rows
        metadata.pop(key, None)
    metadata[h.TraceMetadataKey.TRACE_INFO_FINALIZED] = "true"
    row.request_metadata = [
        h.SqlTraceMetadata(request_id=trace_id, key=k, value=v) for k, v in sorted(metadata.items())
    ]
    assessments = []
    for a in info.assessments:
        sql = h.SqlAssessments.from_mlflow_entity(a)
        sql.trace_id, sql.experiment_id, sql.trace_timestamp_ms = (
            trace_id,
            int(info.experiment_id),
            info.request_time,
        )
        assessments.append(sql)
    row.assessments = assessments
    return row


def _span_rows(
    experiment_id: int, spans: Sequence[Any], h: Any, ensure_ascii: bool
) -> tuple[list, dict, dict | None] | None:
    """The ``spans`` table rows ``log_spans`` inserts for one trace's ``spans``, the trace's
    token usage rolled up the way ``log_spans`` rolls it up, and the root span as stored;
    None when a span carries data only ``log_spans`` derives."""
    rows, nodes, root = [], [], None
    key = h.SpanAttributeKey
    for span in spans:
        resource = getattr(span._span, "resource", None)
        if resource is not None and resource.attributes:
            return None
        content = h.translate_span_when_storing(span)
        attrs = content.get("attributes") or {}
        if any(k in attrs for k in _DERIVED) or any(
            k.startswith(key.TRACE_TAG_PREFIX) for k in attrs
        ):
            return None
        nodes.append(h._span_aggregation_node(span.span_id, span.parent_id, attrs, key.CHAT_USAGE))
        if span.parent_id is None:
            root = content
        rows.append(
            {
                "trace_id": span.trace_id,
                "experiment_id": experiment_id,
                "span_id": span.span_id,
                "parent_span_id": span.parent_id,
                "name": span.name,
                "type": span.span_type,
                "status": span.status.status_code,
                "start_time_unix_nano": span.start_time_ns,
                "end_time_unix_nano": span.end_time_ns,
                "content": json.dumps(content, cls=h.TraceJSONEncoder, ensure_ascii=ensure_ascii),
                "input_cost": None,
                "output_cost": None,
                "total_cost": None,
                "model_name": h.bounded_model_dimension(
                    h._try_parse_json_string(attrs.get(key.MODEL))
                ),
                "model_provider": h.bounded_model_dimension(
                    h._try_parse_json_string(attrs.get(key.MODEL_PROVIDER))
                ),
            }
        )
    return rows, h.aggregate_usage_from_span_nodes(nodes) or {}, root


@functools.cache  # the same answer for the life of the process: look once, not per batch
def _helpers() -> Any:
    """MLflow's names used by ``start_trace`` and ``log_spans``, from the module that uses
    them (None if one moved)."""
    try:
        import mlflow.store.tracking.sqlalchemy_store as s

        needed = (
            "SqlTraceInfo",
            "SqlTraceTag",
            "SqlTraceMetadata",
            "SqlAssessments",
            "SqlSpan",
            "TraceTagKey",
            "TraceMetadataKey",
            "PROMOTED_TRACE_METADATA_KEYS",
            "analytics_columns_from_metadata",
            "validate_trace_name",
            "enqueue_rollup_rebuild_partitions",
            "RollupFamily",
            "IntegrityError",
            "translate_span_when_storing",
            "TraceJSONEncoder",
            "bounded_model_dimension",
            "_try_parse_json_string",
            "SpanAttributeKey",
            "MSSQL",
            "_span_aggregation_node",
            "aggregate_usage_from_span_nodes",
            "TOKEN_COLUMN_BY_KEY",
            "token_count_or_none",
            "TraceState",
        )
        methods = (
            "_get_trace_artifact_location_tag",
            "_get_trace_status_from_root_span",
            "_update_trace_info_attributes",
        )
        if (
            all(hasattr(s, n) for n in needed)
            and hasattr(s.TraceMetadataKey, "TRACE_INFO_FINALIZED")
            and all(hasattr(s.SqlAlchemyStore, m) for m in methods)
        ):
            return s
    except ImportError:
        pass
    return None


def write_traces(
    store: Any, experiment_id: str, traces: Sequence[tuple[Any, Sequence[Any]]]
) -> str:
    """Store ``traces`` (MLflow ``TraceInfo`` with its ``Span`` list) in ``store``.

    Returns how: ``'bulk'`` (one transaction), ``'per-trace'`` (MLflow's ``start_trace``
    per trace, then ``log_spans``: see the module docstring for when), or ``'none'``.
    """
    if not traces:
        return "none"
    h = _helpers()
    if h is None or not isinstance(store, h.SqlAlchemyStore):
        return _per_trace(store, experiment_id, traces)
    eid = int(experiment_id)
    ensure_ascii = (
        getattr(store, "db_type", None) == h.MSSQL
    )  # as log_spans: MSSQL's column is not Unicode
    spans = [_span_rows(eid, trace_spans, h, ensure_ascii) for _, trace_spans in traces]
    if any(s is None for s in spans):
        return _per_trace(store, experiment_id, traces)
    from sqlalchemy import insert

    experiment = store.get_experiment(experiment_id)
    store._check_experiment_is_active(experiment)
    with store.ManagedSessionMaker(read_only=False) as session:
        times = [info.request_time for info, _ in traces]
        span_times = [
            row["start_time_unix_nano"] // 1_000_000 for rows, _, _ in spans for row in rows
        ]
        # The rebuild queue is locked first, as MLflow's writers do (their lock order).
        h.enqueue_rollup_rebuild_partitions(
            session,
            [
                (h.RollupFamily.TRACE_METRIC, eid, times),
                (h.RollupFamily.ASSESSMENT, eid, times),
                (h.RollupFamily.SPAN_COST, eid, span_times),
            ],
        )
        infos = []
        unfinished = (h.TraceState.IN_PROGRESS.value, h.TraceState.STATE_UNSPECIFIED.value)
        for (info, trace_spans), (rows, usage, root) in zip(traces, spans):
            row = _info_row(store, experiment, info, h)
            if rows:
                row.db_payload_generation = 1  # log_spans advances it once per write
            if (
                row.status in unfinished
            ):  # log_spans takes an unfinished trace's state from its root span
                row.status = store._get_trace_status_from_root_span(trace_spans) or row.status
            if root is not None:  # and fills previews the trace info left empty from the root span
                for column, value in store._update_trace_info_attributes(row, root).items():
                    setattr(row, column.key, value)
            if usage and all(getattr(row, c, None) is None for c in h.TOKEN_COLUMN_BY_KEY.values()):
                for k, column in h.TOKEN_COLUMN_BY_KEY.items():  # log_spans' roll-up, unless given
                    value = h.token_count_or_none(usage.get(k))
                    if value is not None:
                        setattr(row, column, value)
            infos.append(row)
        session.add_all(infos)
        try:
            session.flush()
            session.execute(insert(h.SqlSpan.__table__), [r for rows, _, _ in spans for r in rows])
        except h.IntegrityError:  # a trace of the batch is already stored: undo, MLflow merges
            session.rollback()
            conflict = True
        else:
            conflict = False
    if not conflict:
        return "bulk"
    logger.info(
        "bulk trace write met an existing trace; writing this batch of %d one by one", len(traces)
    )
    return _per_trace(store, experiment_id, traces)


def _per_trace(store: Any, experiment_id: str, traces: Sequence[tuple[Any, Sequence[Any]]]) -> str:
    """MLflow's own calls: ``start_trace`` for each trace, then all spans in one ``log_spans``."""
    for info, _ in traces:
        store.start_trace(info)
    spans = [s for _, trace_spans in traces for s in trace_spans]
    if spans:
        store.log_spans(experiment_id, spans)
    return "per-trace"
