"""PNG charts for MLflow: reward histograms and drop reasons.

matplotlib's object API with the Agg canvas: no display needed on servers and Prefect
workers, and no ``pyplot`` global state, which is not thread-safe while Prefect runs tasks
in threads. Imported lazily (matplotlib costs a few hundred milliseconds). ``render_chart``
is what the flows' tracking helper process runs (``TraceWriterProcess.chart``), so neither
that import nor the drawing holds the flow's GIL while the rollout runs.

Example:
    >>> path = reward_histogram({'fidelity': [1.0, 0.5, 1.0]}, '/tmp/rewards.png')  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _figure(width: float, height: float, panels: int = 1) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(1, panels, i + 1) for i in range(panels)]


def reward_histogram(values: Mapping[str, Sequence[float]], path: str, bins: int = 20) -> str:
    """One histogram panel per reward name, written to ``path`` (PNG); returns ``path``."""
    names = [n for n, v in values.items() if len(v)] or ["(no rewards)"]
    fig, axes = _figure(4 * len(names), 3, len(names))
    for ax, name in zip(axes, names):
        data = list(values.get(name, []))
        if data:
            ax.hist(
                data, bins=bins, range=(min(0.0, min(data)), max(1.0, max(data))), color="#4c72b0"
            )
        ax.set_title(name)
        ax.set_xlabel("reward")
        ax.set_ylabel("trajectories")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    return path


def drop_reasons_chart(counts: Mapping[str, int], path: str, top: int = 25) -> str:
    """Horizontal bars of the ``top`` drop reasons (``step/reason`` -> rows), as PNG."""
    items = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[:top] or [("(no drops)", 0)]
    fig, (ax,) = _figure(7, 0.35 * len(items) + 1.2)
    ax.barh([k for k, _ in reversed(items)], [v for _, v in reversed(items)], color="#dd8452")
    ax.set_xlabel("dropped rows")
    ax.set_title("drop reasons")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    return path


#: Chart kinds ``render_chart`` draws: name -> (data, path) -> path.
CHARTS = {"reward_histogram": reward_histogram, "drop_reasons": drop_reasons_chart}


def render_chart(kind: str, data: Any, path: str) -> str:
    """Draw chart ``kind`` (a key of ``CHARTS``) of ``data`` to ``path`` (PNG); returns ``path``."""
    try:
        draw = CHARTS[kind]
    except KeyError:
        raise ValueError(f"unknown chart {kind!r}; known: {', '.join(sorted(CHARTS))}") from None
    return draw(data, path)


def warm_up() -> None:
    """Import what drawing needs (a helper process does it ahead of the first chart)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401
