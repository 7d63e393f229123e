"""Per-trajectory trace files, written the same way by both rollouts.

One pretty-printed JSON file per stored trajectory, named ``step{NNNNNN}-{ok|fail}-{id}.json``:

* ``step`` is the ``global_step`` given to the rollout call, else the rollout's own call
  counter (0, 1, 2, ...), so the step part is always present and calls never overwrite
  each other.
* ``ok`` when ``success_callback(trajectory)`` is truthy, else ``fail`` (also when there is
  no callback or it raises).
* ``id`` is the trajectory's ``id``, else ``user_data`` ``id``/``prompt_id``, with every run of
  characters outside ``[A-Za-z0-9_.-]`` replaced by ``_`` and cut to 64 characters
  (``hotpotqa/42`` becomes ``hotpotqa_42``); else ``idx<position>``. A repeated id within one
  call gets ``-<position>`` appended.

A trajectory is stored when ``trace_callback(trajectory)`` is truthy, or always without a
callback; a callback that raises counts as "do not store". The record holds
``trajectory`` (without the heavy token fields ``input_ids``, ``labels``, ``logprobs``,
``attention_mask``, ``position_ids`` and media tensors), ``ground_truth``, ``stop_reason``,
``truncated``, ``success``, ``turns`` and ``error``. Files are written to a temporary name
and renamed, so a reader never sees half a file. A failure to write one trace is logged and
never fails the rollout.

Example:
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> traj = {'id': 'hotpotqa/42', 'messages': [], 'stop_reason': 'stop', 'input_ids': [1]}
    >>> paths = write_traces([traj], d, step=3,
    ...                      success_callback=lambda t: t['stop_reason'] == 'stop')
    >>> os.path.basename(paths[0])
    'step000003-ok-hotpotqa_42.json'
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinkle.data_format import user_data_get

logger = logging.getLogger("twinkle.rollout")

HEAVY_FIELDS = frozenset(
    {
        "input_ids",
        "labels",
        "logprobs",
        "attention_mask",
        "position_ids",
        "pixel_values",
        "image_grid_thw",
        "mm_token_type_ids",
    }
)
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9_.\-]+")


def trace_id(trajectory: Any, index: int) -> str:
    """The sanitised id used in a trace file name."""
    if isinstance(trajectory, dict):
        candidates = [trajectory.get("id")]
        user_data = trajectory.get("user_data")
        candidates += [user_data_get(user_data, "id"), user_data_get(user_data, "prompt_id")]
        for value in candidates:
            if value is not None and str(value).strip():
                return _UNSAFE_RE.sub("_", str(value).strip())[:64]
    return f"idx{index}"


def _plain(value: Any) -> Any:
    """JSON-safe plain values (numpy and torch scalars and arrays become lists/numbers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def trace_record(trajectory: dict[str, Any], success: bool) -> dict[str, Any]:
    """What one trace file holds."""
    return {
        "trajectory": _plain({k: v for k, v in trajectory.items() if k not in HEAVY_FIELDS}),
        "ground_truth": user_data_get(trajectory.get("user_data"), "ground_truth") or "",
        "stop_reason": trajectory.get("stop_reason"),
        "truncated": trajectory.get("truncated"),
        "success": success,
        "turns": trajectory.get("turns"),
        "error": trajectory.get("error"),
    }


def _ask(callback: Callable[[Any], Any] | None, trajectory: Any, default: bool) -> bool:
    if callback is None:
        return default
    try:
        return bool(callback(trajectory))
    except Exception as exc:  # noqa: BLE001 - a broken callback must not lose the batch
        logger.warning("trace callback %r raised %s: %s", callback, type(exc).__name__, exc)
        return False


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write ``payload`` as pretty JSON to ``path`` via a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2, ensure_ascii=False, default=str)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_traces(
    trajectories: list[dict[str, Any]],
    trace_dir: str | os.PathLike[str],
    step: int,
    trace_callback: Callable[[Any], Any] | None = None,
    success_callback: Callable[[Any], Any] | None = None,
) -> list[str]:
    """Write one trace per stored trajectory; returns the paths written."""
    directory = Path(trace_dir)
    directory.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    written = []
    for index, trajectory in enumerate(trajectories):
        ident = trace_id(trajectory, index)
        if ident in seen:
            ident = f"{ident}-{index}"
        seen.add(ident)
        if not _ask(trace_callback, trajectory, default=True):
            continue
        success = _ask(success_callback, trajectory, default=False)
        path = directory / f"step{step:06d}-{'ok' if success else 'fail'}-{ident}.json"
        try:
            write_json_atomic(path, trace_record(trajectory, success))
        except Exception as exc:  # noqa: BLE001 - a trace is a debugging aid, never a failure
            logger.warning("could not write trace %s: %s: %s", path, type(exc).__name__, exc)
            continue
        written.append(str(path))
    return written
