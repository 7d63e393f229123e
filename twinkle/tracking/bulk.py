"""Bulk creation of MLflow trace records on a SQL tracking store: one transaction per batch.

MLflow's ``SqlAlchemyStore.start_trace`` writes one trace per transaction and looks the
experiment up again for each (measured here: 8.8 ms of CPU per trace on SQLite, 2 cores,
of which ~2.5 ms is the experiment lookup and ~2 ms the commit). A rollout of 500
trajectories spent more time writing trace records than replaying them. MLflow has no
public bulk call, so ``start_traces`` builds the same rows ``start_trace`` builds (MLflow's
own ORM models and helpers: trace info with its promoted analytics columns, tags plus the
artifact-location tag, metadata with the "info finalized" marker, assessments, rollup
invalidation) for a whole batch and flushes them together: ~1.5 ms per trace.

Safety: the rows are the ones ``start_trace`` writes (``tests/flows/test_tracking_bulk.py``
compares both paths through the public read API). If a trace of the batch already exists
(another writer got there first) the transaction is rolled back and the batch goes through
``start_trace`` one by one, which merges; if this MLflow lacks a helper used here (the
module path moved), ``start_traces`` does the same. MLflow is pinned ``<3.18`` in
``pyproject.toml`` for this reason.

Example:
    >>> from mlflow import MlflowClient                                    # doctest: +SKIP
    >>> store = MlflowClient('sqlite:////tmp/m.db')._tracking_client.store   # doctest: +SKIP
    >>> start_traces(store, '1', trace_infos)                              # doctest: +SKIP
    'bulk'
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger("twinkle.tracking")


def _sql_rows(store: Any, experiment: Any, info: Any, helpers: Any) -> Any:
    """The ``SqlTraceInfo`` (with its child rows) that ``start_trace`` would add for ``info``."""
    h = helpers
    trace_id = info.trace_id
    metadata = dict(info.trace_metadata.items())
    row = h.SqlTraceInfo(
        request_id=trace_id, experiment_id=info.experiment_id, timestamp_ms=info.request_time,
        execution_time_ms=info.execution_duration, status=info.state.value,
        client_request_id=info.client_request_id, request_preview=info.request_preview,
        response_preview=info.response_preview,
        trace_name=h.validate_trace_name(info.tags.get(h.TraceTagKey.TRACE_NAME)),
        **h.analytics_columns_from_metadata(metadata),
    )
    row.tags = [h.SqlTraceTag(request_id=trace_id, key=k, value=v) for k, v in info.tags.items()
                if k != h.TraceTagKey.TRACE_NAME] + [store._get_trace_artifact_location_tag(experiment, trace_id)]
    for key in h.PROMOTED_TRACE_METADATA_KEYS:  # kept in columns, not metadata rows
        metadata.pop(key, None)
    metadata[h.TraceMetadataKey.TRACE_INFO_FINALIZED] = "true"
    row.request_metadata = [h.SqlTraceMetadata(request_id=trace_id, key=k, value=v)
                            for k, v in sorted(metadata.items())]
    assessments = []
    for a in info.assessments:
        sql = h.SqlAssessments.from_mlflow_entity(a)
        sql.trace_id, sql.experiment_id, sql.trace_timestamp_ms = trace_id, int(info.experiment_id), info.request_time
        assessments.append(sql)
    row.assessments = assessments
    return row


@functools.cache  # the same answer for the life of the process: look once, not per batch
def _helpers() -> Any:
    """MLflow's names used by ``start_trace``, from the module that uses them (None if moved)."""
    try:
        import mlflow.store.tracking.sqlalchemy_store as s

        needed = ("SqlTraceInfo", "SqlTraceTag", "SqlTraceMetadata", "SqlAssessments", "TraceTagKey",
                  "TraceMetadataKey", "PROMOTED_TRACE_METADATA_KEYS", "analytics_columns_from_metadata",
                  "validate_trace_name", "enqueue_rollup_rebuild_partitions", "RollupFamily", "IntegrityError")
        if all(hasattr(s, n) for n in needed) and hasattr(s.TraceMetadataKey, "TRACE_INFO_FINALIZED"):
            return s
    except ImportError:
        pass
    return None


def start_traces(store: Any, experiment_id: str, infos: Sequence[Any]) -> str:
    """Create the trace records of ``infos`` (MLflow ``TraceInfo``) in ``store``.

    Returns how: ``'bulk'`` (one transaction), ``'per-trace'`` (``store.start_trace`` each:
    not a SQL store, a helper missing, or a trace already there), or ``'none'``.
    """
    if not infos:
        return "none"
    h = _helpers()
    if h is None or not isinstance(store, h.SqlAlchemyStore) or not hasattr(store, "_get_trace_artifact_location_tag"):
        for info in infos:
            store.start_trace(info)
        return "per-trace"
    experiment = store.get_experiment(experiment_id)
    store._check_experiment_is_active(experiment)
    with store.ManagedSessionMaker(read_only=False) as session:
        times = [info.request_time for info in infos]
        h.enqueue_rollup_rebuild_partitions(
            session, [(family, int(experiment_id), times)
                      for family in (h.RollupFamily.TRACE_METRIC, h.RollupFamily.ASSESSMENT)])
        session.add_all([_sql_rows(store, experiment, info, h) for info in infos])
        try:
            session.flush()
        except h.IntegrityError:  # a trace of the batch is already stored: undo, then merge one by one
            session.rollback()
            conflict = True
        else:
            conflict = False
    if not conflict:
        return "bulk"
    logger.info("bulk trace insert met an existing trace; writing this batch of %d one by one", len(infos))
    for info in infos:
        store.start_trace(info)
    return "per-trace"
