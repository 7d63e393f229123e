"""Prompts and ground truths of an environment's tasks, as items or a Hugging Face dataset.

``DatasetProvider`` resets the environment at each task index and keeps what a trainer or
a rollout needs: the prompt, the chat messages, the tools and the reference answer (found
with :func:`twinkle.core.state.find_ground_truth`, the same lookup the judge uses).
``datasets`` is imported only by :meth:`DatasetProvider.to_hf_dataset`.

Example:
    >>> from twinkle.core.environments import MathEnvironment
    >>> provider = DatasetProvider(MathEnvironment())
    >>> item = provider[0]
    >>> item.ground_truth, item.messages[0]["role"]
    ('18', 'user')
    >>> len(provider.get_items([0, 1]))
    2
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from twinkle.core.state import ObservationImages, find_ground_truth
from twinkle.core.tools import ToolDefinition
from twinkle.errors import require

__all__ = ["DatasetProvider", "TaskItem"]


@dataclass(frozen=True)
class TaskItem:
    """One task as a prompt: index, prompt text, chat messages, reference answer, tools.

    Example:
        >>> item = TaskItem(3, "2 + 2?", ({"role": "user", "content": "2 + 2?"},), "4",
        ...                 metadata={"task_id": "math-004"})
        >>> item.task_id, TaskItem(5, "q", (), None).task_id
        ('math-004', '5')
    """

    task_index: int
    prompt: str
    messages: tuple[dict[str, Any], ...]
    ground_truth: str | None
    metadata: dict[str, Any] = field(default_factory=dict)
    images: ObservationImages = field(default_factory=ObservationImages)
    available_tools: tuple[ToolDefinition, ...] = ()

    @property
    def task_id(self) -> str:
        return str(self.metadata.get("task_id", self.task_index))


class DatasetProvider:
    """Task items of an environment that supports task indices and ``len``.

    Args:
        environment: the environment; its spec must have ``supports_task_index`` and
            ``supports_len``.

    Raises:
        TypeError: when either capability is missing.

    Example:
        >>> from twinkle.core.registry import environment_registry
        >>> ds = DatasetProvider(environment_registry.get("multiple_choice")).to_hf_dataset([0, 1])
        >>> ds.column_names[:3], ds.num_rows
        (['task_index', 'prompt', 'ground_truth'], 2)
    """

    def __init__(self, environment: Any) -> None:
        spec = environment.spec
        missing = [
            flag for flag in ("supports_task_index", "supports_len") if not getattr(spec, flag)
        ]
        if missing:
            raise TypeError(
                f"DatasetProvider needs {' and '.join(missing)}; '{spec.name}' lacks it"
            )
        self.environment = environment

    def __len__(self) -> int:
        return len(self.environment)

    def __getitem__(self, task_index: int) -> TaskItem:
        state, info = self.environment.reset(options={"task_index": task_index})
        obs = state.observation
        messages = obs.messages or ({"role": "user", "content": obs.prompt},)
        ground_truth = (
            None if self.environment.spec.is_multi_turn else find_ground_truth(state.hidden)
        )
        return TaskItem(
            task_index=task_index,
            prompt=obs.prompt,
            messages=tuple(dict(m) for m in messages),
            ground_truth=ground_truth,
            metadata={"episode_id": state.metadata.episode_id, **info},
            images=obs.get_images(),
            available_tools=tuple(obs.available_tools or self.environment.available_tools),
        )

    def __iter__(self) -> Iterator[TaskItem]:
        return (self[i] for i in range(len(self)))

    def get_items(self, indices: Sequence[int] | None = None) -> list[TaskItem]:
        """Items for ``indices`` (all tasks when None)."""
        return [self[i] for i in (range(len(self)) if indices is None else indices)]

    def to_hf_dataset(self, indices: Sequence[int] | None = None) -> Any:
        """A ``datasets.Dataset`` with task_index, prompt, ground_truth, messages (and images).

        Raises:
            MissingExtraError: (an ImportError) when ``datasets`` is not installed (the ``hf``
                extra).
        """
        datasets = require("datasets", "to_hf_dataset", "hf")
        items = self.get_items(indices)
        columns: dict[str, list[Any]] = {
            "task_index": [i.task_index for i in items],
            "prompt": [i.prompt for i in items],
            "ground_truth": [i.ground_truth for i in items],
            "messages": [[_plain_message(m) for m in i.messages] for i in items],
            "task_id": [i.task_id for i in items],
        }
        if any(i.images for i in items):
            columns["images"] = [
                [{"data": img.data, "media_type": img.media_type} for img in i.images.all]
                for i in items
            ]
        return datasets.Dataset.from_dict(columns)


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    # Arrow needs one type per field across rows: keep role and text content only.
    content = message.get("content")
    return {
        "role": str(message.get("role", "")),
        "content": content if isinstance(content, str) else str(content or ""),
    }
