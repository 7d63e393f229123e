"""``Events``: what a run of per-row steps did to each row, by position, and
``apply_steps``, which runs the steps and records it. The streaming path
(``stream_last``) and the Ray path (``ray_steps``) both run the steps that follow or precede
a global step this way, so counts, tags and the dropped log can be taken later over only
the rows that global step keeps. Plain lists while recording (appends are cheap), numpy
arrays (``Events.arrays``) to store and select.

Example:
    >>> from twinkle.preprocessor.quality import _IDX
    >>> def short(rows):
    ...     return ([r for r in rows if len(r['text']) < 5],
    ...             [{**r, 'drop_reason': 'long'} for r in rows if len(r['text']) >= 5])
    >>> ev = Events(['short'])
    >>> rows = [{'text': 'hi', _IDX: 0}, {'text': 'too long', _IDX: 1}]
    >>> [r['text'] for r in apply_steps([short], rows, ev, ev.log)]
    ['hi']
    >>> ev.pos, ev.step, ev.kind, ev.labels, len(ev.log)
    ([1], [0], [0], ['"long"'], 1)
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np


class Events:
    """What a run of per-row steps did to each row: drops (step, reason) and tags, by
    position, plus the dropped rows' log lines and each step's seconds.

    ``kind`` is 0 for a drop with reason ``labels[val]`` and 1 for a tag ``labels[val]``;
    labels are JSON text.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.pos: list[int] = []
        self.step: list[int] = []
        self.kind: list[int] = []
        self.val: list[int] = []
        self.labels: list[str] = []
        self._index: dict[str, int] = {}
        self.seconds = [0.0] * len(self.names)
        self.log: list[str] = []  # one line per drop, in the order of the drop events

    def add(self, pos: int, step: int, kind: int, value: Any) -> None:
        key = json.dumps(value, default=str)
        if key not in self._index:
            self._index[key] = len(self.labels)
            self.labels.append(key)
        self.pos.append(pos)
        self.step.append(step)
        self.kind.append(kind)
        self.val.append(self._index[key])

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "pos": np.array(self.pos, np.int64), "step": np.array(self.step, np.int16),
            "kind": np.array(self.kind, np.int8), "val": np.array(self.val, np.int32),
        }  # fmt: skip


def apply_steps(
    steps: Sequence[Any], rows: list[dict[str, Any]], ev: Events, log: list[str] | None
) -> list[dict[str, Any]]:
    """``steps`` (named ``ev.names``) over ``rows``, which carry their position under
    ``quality._IDX``; records drops and tags in ``ev`` and the dropped rows' log lines in
    ``log`` (None: no log); returns the survivors, positions still on them."""
    from twinkle.preprocessor.quality import _IDX, _log_line, _run_step

    for k, (step, name) in enumerate(zip(steps, ev.names)):
        if not rows:
            break
        t0 = time.perf_counter()
        kept, dropped = _run_step(step, name, rows)
        ev.seconds[k] += time.perf_counter() - t0
        for d in dropped:
            p = d.get(_IDX) if isinstance(d, dict) else None
            if not isinstance(p, int):
                raise RuntimeError(f"step {name} dropped a row without its position")
            ev.add(p, k, 0, d.get("drop_reason") or name)
            if log is not None:
                log.append(_log_line(name, d))  # without the position and drop_reason
        tag_field = getattr(step, "tag_field", None)
        if isinstance(tag_field, str):
            for r in kept:
                ev.add(r[_IDX], k, 1, r.get(tag_field))
        rows = kept
    return rows
