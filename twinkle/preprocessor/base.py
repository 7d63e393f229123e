"""The contract every curation step follows, and the column/row conversions.

A step takes a batch (a list of rows, or a dict of columns as ``datasets.map(batched=True)``
passes it) and returns ``(kept, dropped)``. Every dropped row is a shallow copy carrying
``drop_reason``. ``Filter`` turns a per-row ``check`` into such a step and guarantees the
invariants the pipeline relies on: rows that are not well formed are dropped with a
``malformed_*`` reason, an exception inside ``check`` drops that row (``malformed_row``)
instead of stopping the batch, and ``len(kept) + len(dropped) == len(rows)``.

Example:
    >>> class NoGreeting(Filter):
    ...     def check(self, row):
    ...         return 'greeting' if row['messages'][0].get('content') == 'hi' else None
    >>> rows = [{'messages': [{'role': 'user', 'content': 'hi'}]},
    ...         {'messages': [{'role': 'user', 'content': 'sum 2+2'}]}, 7]
    >>> kept, dropped = NoGreeting()(rows)
    >>> len(kept), [d['drop_reason'] for d in dropped]
    (1, ['greeting', 'malformed_row'])
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

logger = logging.getLogger("twinkle.preprocessor")

Row = dict[str, Any]


def map_col_to_row(batch: Any) -> list[Any]:
    """A list passes through; a mapping of columns becomes rows (missing cells become None)."""
    if not batch:
        return []
    if isinstance(batch, Mapping):
        keys = list(batch)
        n = max((len(v) for v in batch.values() if isinstance(v, (list, tuple))), default=0)
        return [{k: (batch[k][i] if i < len(batch[k]) else None) for k in keys} for i in range(n)]
    return list(batch)


def map_row_to_col(rows: Any, keys: Iterable[str] | None = None) -> dict[str, list[Any]]:
    """Rows to columns over the union of ``keys`` and every row's keys (None where missing)."""
    if isinstance(rows, Mapping):
        return dict(rows)
    columns: dict[str, None] = dict.fromkeys(keys or ())
    for row in rows:
        if isinstance(row, Mapping):
            columns.update(dict.fromkeys(row))
    return {k: [row.get(k) if isinstance(row, Mapping) else None for row in rows] for k in columns}


def drop(row: Any, reason: str) -> Row:
    """A dropped copy of ``row`` with its reason (non-dict input is wrapped, never lost)."""
    if isinstance(row, dict):
        return {**row, "drop_reason": reason}
    return {"row": row, "drop_reason": reason}


def malformed_reason(row: Any) -> str | None:
    """Why ``row`` cannot be curated at all, or None when it is a dict with a message list."""
    if not isinstance(row, dict):
        return "malformed_row"
    messages = row.get("messages")
    if not isinstance(messages, list):
        return "malformed_messages"
    if not messages:
        return "malformed_empty_messages"
    return None


class Filter:
    """Base of the per-row filters: subclasses implement ``check(row) -> reason | None``.

    ``check`` only sees rows whose ``messages`` is a non-empty list; it may still meet
    non-dict messages and odd content, and should skip those rather than raise.

    Example:
        >>> class Short(Filter):
        ...     def check(self, row):
        ...         return 'too_short' if len(row['messages']) < 2 else None
        >>> kept, dropped = Short()([{'messages': [{'role': 'user', 'content': 'hi'}]}])
        >>> kept, dropped[0]['drop_reason']
        ([], 'too_short')
    """

    #: Set False in subclasses that accept rows with an empty message list.
    requires_messages: bool = True

    @property
    def __name__(self) -> str:  # QualityPreprocessor names steps by ``__name__``
        return type(self).__name__

    def check(self, row: Row) -> str | None:
        raise NotImplementedError

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        kept: list[Row] = []
        dropped: list[Row] = []
        for row in map_col_to_row(rows):
            reason = malformed_reason(row)
            if reason == "malformed_empty_messages" and not self.requires_messages:
                reason = None
            if reason is None:
                try:
                    reason = self.check(row)
                except Exception as exc:  # noqa: BLE001 - one broken row must never stop the batch
                    logger.debug("%s failed on a row: %r", self.__name__, exc)
                    reason = f"malformed_row:{type(exc).__name__}"
            if reason is None:
                kept.append(row)
            else:
                dropped.append(drop(row, reason))
        return kept, dropped


class Mapper:
    """Base of steps that rewrite rows instead of dropping them: implement ``map_row``.

    ``map_row`` returns the new row, or raises; a row it raises on is dropped with
    ``malformed_row:<Exception>`` so the invariant still holds.

    Example:
        >>> class Tag(Mapper):
        ...     def map_row(self, row):
        ...         return {**row, 'source': row['meta']['source']}
        >>> rows = [{'messages': [{}], 'meta': {'source': 'web'}}, {'messages': [{}]}]
        >>> kept, dropped = Tag()(rows)
        >>> kept[0]['source'], dropped[0]['drop_reason']
        ('web', 'malformed_row:KeyError')
    """

    @property
    def __name__(self) -> str:
        return type(self).__name__

    def map_row(self, row: Row) -> Row:
        raise NotImplementedError

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        kept: list[Row] = []
        dropped: list[Row] = []
        for row in map_col_to_row(rows):
            reason = malformed_reason(row)
            if reason is not None:
                dropped.append(drop(row, reason))
                continue
            try:
                kept.append(self.map_row(row))
            except Exception as exc:  # noqa: BLE001 - one broken row must never stop the batch
                dropped.append(drop(row, f"malformed_row:{type(exc).__name__}"))
        return kept, dropped
