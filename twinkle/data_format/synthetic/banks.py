"""The generator's phrase banks, read once from the JSON files in ``data/``.

``data/<lang>.json`` holds everything written in one language:

- ``system``: system prompts; ``ask``/``answer``: per task, the user requests and the
  final answer's opening (``{...}`` fields are filled from the task's values);
- ``step_intro``: the text before a tool call; ``think``: planning sentences for reasoning;
- ``filler``: explanation sentences that close answers and grow rows to a target size
  (some are hard negatives: they look like hesitation or refusal and are neither);
- ``follow_up``, ``ticket``: the glue of multi-round conversations; ``notes``: note texts;
- ``script_what``: what each sandbox script does; ``qa``: tool-free questions with their
  answer sentences;
- defect material: ``greetings``, ``refusals``, ``refusal_tail``, ``harmful_ask``,
  ``hesitation``.

``data/common.json`` holds the language-neutral tables: ``items``, ``words``, ``services``,
``harmful_task``, ``garble`` (sub-word fragments per script), ``special_tokens`` and
``repeat_chars``.

Lists load as tuples, so a caller cannot change the shared, cached tables by accident. Order
is part of the contract: the generator samples by position, so reordering or inserting an
entry changes the output of every seed.

Example:
    >>> lang_bank("en")["follow_up"]
    'Thanks. One more thing:'
    >>> lang_bank("en") is lang_bank("en")
    True
    >>> common_bank()["services"][:2]
    ('ingest', 'scorer')
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return {k: _freeze(v) for k, v in value.items()}
    return value


@functools.cache
def _load(name: str) -> dict[str, Any]:
    text = (resources.files(__package__) / "data" / f"{name}.json").read_text(encoding="utf-8")
    return _freeze(json.loads(text))


def lang_bank(lang: str) -> dict[str, Any]:
    """The phrase bank of one language (``en``, ``zh``, ``ja`` or ``ko``), loaded on first use.

    Example:
        >>> sorted(lang_bank("zh")["answer"])[:2]
        ['json_port', 'multiply']
    """
    return _load(lang)


def common_bank() -> dict[str, Any]:
    """The language-neutral tables (items, words, garble fragments), loaded on first use.

    Example:
        >>> sorted(common_bank()["garble"])[:3]
        ['arabic', 'cjk', 'cyrillic']
    """
    return _load("common")
