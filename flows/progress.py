"""Progress of a long stage, where users look for it: a Prefect progress artifact, a CLI bar.

``StageProgress`` counts finished items (trajectories). A background thread pushes the
count at most every ``interval_s``: to a Prefect progress artifact (Prefect's own
``create_progress_artifact`` / ``update_progress_artifact``, shown on the flow run's
Artifacts tab and live in the UI) and to the ``callback`` it was given (``twinkle run``
passes one that draws a ``rich`` bar). ``advance`` only bumps a counter, so
the rollout's event loop never waits on the Prefect API, and a Prefect API that fails to
take an update costs a log line, never the stage.

Example:
    >>> seen = []
    >>> progress = StageProgress('rollout', total=3, artifact=False,
    ...                          callback=lambda stage, done, total: seen.append((done, total)))
    >>> progress.advance(); progress.advance(2); progress.close()
    >>> seen[-1]
    (3, 3)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("twinkle.flows")


class StageProgress:
    """Finished items of one stage, pushed to a Prefect progress artifact and a callback.

    Args:
        stage: stage name (artifact description and callback argument), e.g. ``'rollout'``.
        total: items the stage will finish.
        artifact: create a Prefect progress artifact (needs a flow or task run context).
        interval_s: at most one push per interval while items finish.
        callback: ``callable(stage, done, total)``, run in the pushing thread (the CLI's
            progress bar); one that raises costs a debug line, never the stage.
    """

    def __init__(
        self,
        stage: str,
        total: int,
        *,
        artifact: bool = True,
        interval_s: float = 1.0,
        callback: Callable[[str, int, int], Any] | None = None,
    ) -> None:
        self.stage, self.total, self.interval_s = stage, max(0, int(total)), interval_s
        self.callback = callback
        self.done = 0
        self._pushed = -1
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._artifact_id = self._create_artifact() if artifact else None
        self._push(
            artifact=False
        )  # the bar appears when the stage starts (the artifact says 0 already)
        self._thread = threading.Thread(
            target=self._loop, name=f"twinkle-progress-{stage}", daemon=True
        )
        self._thread.start()

    def advance(self, n: int = 1) -> None:
        """``n`` more items finished (cheap: the push happens in the background thread)."""
        with self._lock:
            self.done += n

    def close(self) -> None:
        """Push the final count and stop the thread."""
        self._stop.set()
        self._thread.join()
        self._push()

    def _percent(self, done: int) -> float:
        return 100.0 if self.total == 0 else min(100.0, 100.0 * done / self.total)

    def _description(self, done: int) -> str:
        return f"{self.stage}: {done}/{self.total} finished"

    def _create_artifact(self) -> Any:
        try:
            from prefect.artifacts import create_progress_artifact

            return create_progress_artifact(
                progress=self._percent(0), description=self._description(0)
            )
        except Exception as exc:  # noqa: BLE001 - no run context or API: progress is a convenience
            logger.debug("no progress artifact for %s: %s", self.stage, exc)
            return None

    def _push(self, artifact: bool = True) -> None:
        with self._lock:
            done = self.done
        if done == self._pushed:
            return
        self._pushed = done
        if self.callback is not None:
            try:
                self.callback(self.stage, done, self.total)
            except Exception as exc:  # noqa: BLE001 - a broken bar must not stop the stage
                logger.debug("progress callback failed: %s", exc)
        if artifact and self._artifact_id is not None:
            try:
                from prefect.artifacts import update_progress_artifact

                update_progress_artifact(
                    self._artifact_id,
                    progress=self._percent(done),
                    description=self._description(done),
                )
            except Exception as exc:  # noqa: BLE001 - a failed update must not stop the stage
                logger.warning("progress artifact update failed (%s); the stage goes on", exc)
                self._artifact_id = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._push()
