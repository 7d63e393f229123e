"""The ``huggingface`` adapter: question/answer datasets as single-turn environments.

A source is a ``datasets.Dataset`` (or ``DatasetDict`` with ``split``), a list of dicts, a
``save_to_disk`` folder, a JSON/JSONL/Parquet file, or a Hub name (loaded with
``datasets.load_dataset`` when the Hub can be reached; otherwise a clear
:class:`~twinkle.errors.EnvError` comes at once, not after minutes of retries). Files are read
with pyarrow/orjson, rows are fetched lazily.

Environment names are column presets; ``fields`` overrides any of them:

==============  ================================  ======================================
preset          columns (prompt / answer / ...)   scoring
==============  ================================  ======================================
gsm8k           question / answer (``#### n``)    math equivalence of the final number
hendrycks_math  problem / solution (``\\boxed``)   math equivalence (``math-verify``)
mmlu            question / answer + choices       the choice letter
qa              question / answer                 normalised exact match
==============  ================================  ======================================

Example:
    >>> from twinkle.core.registry import environment_registry
    >>> rows = [{"question": "2+3?", "answer": "Add them.\\n#### 5"}]
    >>> env = environment_registry.get("gsm8k", adapter="huggingface", dataset=rows)
    >>> s, _ = env.reset(options={"task_index": 0})
    >>> env.step(s, Action.from_text("so \\\\boxed{5}")).rewards.total
    1.0
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from twinkle.core.adapters._common import BaseAdapter, SingleTurnEnv, outcome_signal
from twinkle.core.extraction import (
    BoxedExtractor,
    CompositeExtractor,
    GSM8KExtractor,
    MultipleChoiceExtractor,
    NumericExtractor,
    PatternAnswerExtractor,
    TagBasedExtractor,
)
from twinkle.core.state import Action
from twinkle.errors import EnvError, require

__all__ = ["PRESETS", "HuggingFaceAdapter", "HuggingFaceEnvironment", "load_rows"]

_MATH_PROMPT = "{prompt}\n\nSolve step by step and give the final answer as \\boxed{{answer}}."
_MC_PROMPT = "{prompt}\n\n{choices}\n\nAnswer with the letter of the correct choice."
_QA_PROMPT = "{prompt}\n\nGive the final answer in <answer></answer> tags."

#: preset -> fields, answer transform, scoring, prompt template
PRESETS: dict[str, dict[str, Any]] = {
    "gsm8k": {
        "fields": {"prompt": "question", "answer": "answer"},
        "answer_format": "gsm8k",
        "scoring": "math",
        "template": _MATH_PROMPT,
    },
    "hendrycks_math": {
        "fields": {"prompt": "problem", "answer": "solution"},
        "answer_format": "boxed",
        "scoring": "math",
        "template": _MATH_PROMPT,
    },
    "mmlu": {
        "fields": {"prompt": "question", "answer": "answer", "choices": "choices"},
        "answer_format": "choice",
        "scoring": "choice",
        "template": _MC_PROMPT,
    },
    "qa": {
        "fields": {"prompt": "question", "answer": "answer"},
        "answer_format": "raw",
        "scoring": "exact",
        "template": _QA_PROMPT,
    },
}
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NORM = re.compile(r"[\s\W_]+")


def _hub_reachable(timeout: float = 3.0) -> str | None:
    """None when the Hub answers on TCP, else the reason it does not."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        return "HF_HUB_OFFLINE is set"
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return f"{host}:{port} is not reachable ({exc})"
    return None


def load_rows(source: Any, *, split: str | None = None, subset: str | None = None) -> Any:
    """A row source for ``source``: anything with ``len`` and ``[i] -> dict``."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source).expanduser()
        if path.is_dir():
            datasets = require(
                "datasets", "the 'huggingface' adapter (save_to_disk folders)", "envs"
            )
            return _pick_split(datasets.load_from_disk(str(path)), split)
        if path.is_file():
            suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
            if suffix == ".parquet":
                import pyarrow.parquet as pq

                return pq.read_table(path).to_pylist()
            if suffix in {".jsonl", ".json"}:
                return _read_json(path)
            raise ValueError(f"{path}: expected a .json, .jsonl or .parquet file")
        if str(source).startswith((".", "/", "~")) or path.suffix in {".json", ".jsonl"}:
            raise FileNotFoundError(f"dataset file or folder not found: {path}")
        return _from_hub(str(source), split, subset)
    if hasattr(source, "keys") and hasattr(source, "values") and not isinstance(source, dict):
        return _pick_split(source, split)  # a DatasetDict
    if hasattr(source, "__len__") and hasattr(source, "__getitem__"):
        return source
    raise TypeError(f"unsupported dataset source {type(source).__name__}")


def _read_json(path: Path) -> list[dict[str, Any]]:
    import orjson

    text = path.read_bytes()
    stripped = text.lstrip()
    if stripped.startswith(b"{") and path.suffix == ".json":
        data = orjson.loads(text)  # {"data": [...]} or another single list of rows
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise ValueError(f"{path}: expected a list of rows (or an object holding one)")
        return lists[0]
    if stripped.startswith(b"["):
        return list(orjson.loads(text))
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def _pick_split(data: Any, split: str | None) -> Any:
    if not (hasattr(data, "keys") and hasattr(data, "values")):
        return data
    names = list(data.keys())
    if split is None:
        split = next((s for s in ("test", "validation", "train") if s in names), names[0])
    if split not in names:
        raise KeyError(f"split {split!r} not found; available: {names}")
    return data[split]


def _from_hub(name: str, split: str | None, subset: str | None) -> Any:
    datasets = require("datasets", "the 'huggingface' adapter (Hub datasets)", "envs")
    reason = _hub_reachable()
    if reason is not None:
        raise EnvError(
            f"cannot load {name!r} from the Hugging Face Hub: {reason}. Download it where "
            "the Hub is reachable (Dataset.save_to_disk, or a JSON/JSONL/Parquet file) and "
            "pass that path instead."
        )
    try:
        return _pick_split(datasets.load_dataset(name, subset, split=split), split)
    except Exception as exc:  # noqa: BLE001 - any load failure becomes one clear EnvError
        raise EnvError(f"cannot load {name!r} from the Hugging Face Hub: {exc}") from exc


def _boxed(text: str) -> str | None:
    return BoxedExtractor().extract(text)[0]


class HuggingFaceEnvironment(SingleTurnEnv):
    """Dataset rows as single-turn tasks, scored by the preset's rule.

    Args:
        name: a preset (:data:`PRESETS`).
        path: a file, ``save_to_disk`` folder or Hub name; or ``dataset``: a Dataset,
            DatasetDict or list of dicts.
        split, subset: the split (default test, validation, then train) and Hub config.
        fields: column names overriding the preset's (``prompt``, ``answer``, ``choices``,
            ``id``).
        scoring: ``math``, ``choice`` or ``exact`` (default: the preset's).
        answer_format: how the reference is read: ``gsm8k`` (after ``####``), ``boxed``,
            ``choice`` (an index or a letter), ``raw``.
        template: the prompt template (``{prompt}``, ``{choices}``).
        limit: keep the first ``limit`` rows.
    """

    adapter_name = "huggingface"

    def __init__(
        self,
        name: str = "qa",
        *,
        path: str | os.PathLike[str] | None = None,
        dataset: Any = None,
        split: str | None = None,
        subset: str | None = None,
        fields: Mapping[str, str] | None = None,
        scoring: str | None = None,
        answer_format: str | None = None,
        template: str | None = None,
        limit: int | None = None,
        system_prompt: str | None = None,
        pre_cleaners: Any = None,
        post_cleaners: Any = None,
        extra_rewards: Sequence[Any] = (),
    ) -> None:
        if name not in PRESETS:
            raise KeyError(f"huggingface preset {name!r} not found; choose from {list(PRESETS)}")
        if (path is None) == (dataset is None):
            raise ValueError("give exactly one of path= (file, folder, Hub name) or dataset=")
        preset = PRESETS[name]
        self.fields = {**preset["fields"], **(fields or {})}
        self.scoring = scoring or preset["scoring"]
        self.answer_format = answer_format or preset["answer_format"]
        self.template = template or preset["template"]
        if self.scoring not in {"math", "choice", "exact"}:
            raise ValueError(f"scoring must be math, choice or exact, got {self.scoring!r}")
        self.rows = load_rows(dataset if dataset is not None else path, split=split, subset=subset)
        size = len(self.rows) if limit is None else min(limit, len(self.rows))
        if self.scoring == "choice":
            extractor: Any = CompositeExtractor(
                extractors=[TagBasedExtractor("answer"), MultipleChoiceExtractor()]
            )
        elif self.scoring == "math":
            extractor = CompositeExtractor(
                extractors=[
                    BoxedExtractor(),
                    GSM8KExtractor(),
                    TagBasedExtractor("answer"),
                    PatternAnswerExtractor(),
                    NumericExtractor(),
                ]
            )
        else:
            extractor = TagBasedExtractor("answer")
        super().__init__(
            name,
            size=size,
            system_prompt=system_prompt,
            extractor=extractor,
            pre_cleaners=pre_cleaners,
            post_cleaners=post_cleaners,
            extra_rewards=extra_rewards,
            metadata={"source": str(path) if path is not None else type(dataset).__name__},
        )

    def _column(self, row: Mapping[str, Any], key: str) -> Any:
        column = self.fields.get(key)
        if column is None:
            return None
        if column not in row:
            raise KeyError(f"column {column!r} ({key}) not in row; columns: {sorted(row)}")
        return row[column]

    def reference(self, raw: Any, choices: Sequence[Any] | None) -> str | None:
        """The reference answer of a row, read with ``answer_format``."""
        if raw is None:
            return None
        if self.answer_format == "gsm8k":
            text = str(raw)
            return text.rsplit("####", 1)[-1].strip().replace(",", "") if "####" in text else text
        if self.answer_format == "boxed":
            return _boxed(str(raw)) or str(raw)
        if self.answer_format == "choice":
            if isinstance(raw, int) or (isinstance(raw, str) and raw.strip().isdigit()):
                return _LETTERS[int(raw)]
            text = str(raw).strip()
            if choices and text in [str(c) for c in choices]:
                return _LETTERS[[str(c) for c in choices].index(text)]
            return text.upper()
        return str(raw)

    def load_task(self, index: int) -> dict[str, Any]:
        row = self.rows[index]
        choices = self._column(row, "choices") if "choices" in self.fields else None
        listed = "\n".join(f"{_LETTERS[i]}. {c}" for i, c in enumerate(choices or []))
        prompt = self.template.format(prompt=self._column(row, "prompt"), choices=listed)
        task_id = row.get(self.fields["id"]) if "id" in self.fields else None
        return {
            "prompt": prompt,
            "answer": self.reference(self._column(row, "answer"), choices),
            "id": task_id if task_id is not None else index,
            "row": row,
        }

    def score(self, task: Mapping[str, Any], extracted: str | None, action: Action) -> tuple:
        gold = task["answer"]
        if extracted is None:
            outcome = "unparsed"
        elif self.scoring == "math":
            from twinkle.core.math_equivalence import math_outcome

            outcome = math_outcome(extracted, gold)
        elif self.scoring == "choice":
            outcome = "correct" if extracted.strip().upper() == str(gold).upper() else "wrong"
        else:
            same = (
                _NORM.sub(" ", extracted).strip().lower()
                == _NORM.sub(" ", str(gold)).strip().lower()
            )
            outcome = "correct" if same else "wrong"
        reward = 1.0 if outcome == "correct" else 0.0
        return (outcome_signal("correctness", outcome, reward, extracted=extracted, expected=gold),)


class HuggingFaceAdapter(BaseAdapter):
    """Adapter over dataset files, folders and ``datasets`` objects (``twinkle[envs]``).

    Example:
        >>> HuggingFaceAdapter().list_environments()
        ['gsm8k', 'hendrycks_math', 'mmlu', 'qa']
    """

    name = "huggingface"
    requires = ("datasets",)

    def list_environments(self) -> list[str]:
        return sorted(PRESETS)

    def ensure_installed(self) -> None:
        """Files and lists need no extra package; folders and Hub names check on use."""

    def get_environment(self, name: str, **config: Any) -> HuggingFaceEnvironment:
        return HuggingFaceEnvironment(name, **config)

    def get_environment_info(self, name: str) -> dict[str, Any]:
        info = super().get_environment_info(name)
        preset = PRESETS[name]
        info.update(fields=preset["fields"], scoring=preset["scoring"])
        info["description"] = f"dataset rows with {preset['scoring']} scoring"
        return info
