"""``ModelFilter``: keep rows whose model id is allowed.

Exact names and shell-style globs (``fnmatch``, standard library) in ``allowed_models``;
family regexes in ``patterns``. Everything is compiled into one case-insensitive regex at
construction, so the per-row cost is one ``fullmatch``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from twinkle.preprocessor.base import Filter, Row

MODEL_NOT_ALLOWED = "model_not_allowed"
MISSING_MODEL_ID = "missing_model_id"

#: Large open-weight families used when neither ``allowed_models`` nor ``patterns`` is given.
#: Each pattern also matches any suffix of ``[-\w.]`` characters (``-instruct``, ``-fp8``).
#: They deliberately reject models under 100B parameters and vision-language (VL) models:
#: Qwen3 matches only sizes 100B-399B (``qwen/qwen3-235b-a22b``), not ``qwen/qwen3-8b``.
DEFAULT_FAMILY_PATTERNS: tuple[str, ...] = (
    r"minimax/minimax-m[23][\d.]*",
    r"opengvlab/internvl[\d._]+-2\d{2}b",
    r"qwen/qwen3[\d.]*-[123]\d{2}b(?:-a\d+b)?",
    r"qwen/qwen3-coder",
    r"xiaomimimo/mimo-v[\d.]+",
    r"(?:zhipuai|z-ai)/glm-[56][\d.]*",
    r"deepseek-ai/deepseek-(?:r1|v[34])",
    r"moonshotai/kimi",
    r"stepfun-ai/step",
)

_GLOB_CHARS = frozenset("*?[")


class ModelFilter(Filter):
    """Keep rows whose ``row[field]`` is an allowed model id.

    Args:
        allowed_models: exact model ids (``'qwen3.5-32b'``) or glob patterns
            (``'qwen3.5-*'``, ``'deepseek-ai/*'``); matched against the whole id,
            ignoring case.
        patterns: family regexes; each matches the whole id followed by any
            ``[-\\w.]*`` suffix, ignoring case.
        field: the row key holding the model id.

    With neither ``allowed_models`` nor ``patterns``, ``DEFAULT_FAMILY_PATTERNS`` apply:
    large open-weight families only (they reject models under 100B and VL models). With
    ``allowed_models`` alone, only those ids pass; with both, either may match.

    Drop reasons: ``model_not_allowed``, ``missing_model_id`` (field absent, None or empty).

    Example:
        >>> f = ModelFilter(allowed_models=['qwen3.5-4b', 'qwen3.5-32b'])
        >>> msgs = [{'role': 'user', 'content': 'x'}]
        >>> kept, dropped = f([{'model_id': 'Qwen3.5-32B', 'messages': msgs},
        ...                    {'model_id': 'gpt-4o', 'messages': msgs}])
        >>> len(kept), dropped[0]['drop_reason']
        (1, 'model_not_allowed')
    """

    def __init__(
        self,
        allowed_models: Iterable[str] | None = None,
        patterns: Iterable[str] | None = None,
        field: str = "model_id",
    ) -> None:
        if isinstance(allowed_models, str) or isinstance(patterns, str):
            raise TypeError("allowed_models and patterns take lists of strings, not one string")
        allowed = list(allowed_models or ())
        families = list(patterns) if patterns is not None else []
        if allowed_models is None and patterns is None:
            families = list(DEFAULT_FAMILY_PATTERNS)
        if not allowed and not families:
            raise ValueError("ModelFilter needs at least one entry in allowed_models or patterns")
        if not isinstance(field, str) or not field:
            raise ValueError(f"field={field!r} must be a non-empty string")
        alternatives = []
        for name in allowed:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"allowed_models entry {name!r} must be a non-empty string")
            name = name.strip()
            if _GLOB_CHARS & set(name):
                # fnmatch.translate ends in \Z; with fullmatch that is redundant but harmless.
                alternatives.append(fnmatch.translate(name))
            else:
                alternatives.append(re.escape(name))
        for pattern in families:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise ValueError(f"patterns entry {pattern!r} is not a valid regex: {exc}") from exc
            alternatives.append(f"{pattern}[-\\w.]*")
        self.allowed_models = allowed
        self.patterns = families
        self.field = field
        self._regex = re.compile("|".join(f"(?:{a})" for a in alternatives), re.IGNORECASE)

    def allows(self, model_id: str) -> bool:
        """True when ``model_id`` matches an allowed name, glob or family."""
        return self._regex.fullmatch(model_id.strip()) is not None

    def check(self, row: Row) -> str | None:
        value = row.get(self.field)
        if value is None or (isinstance(value, str) and not value.strip()):
            return MISSING_MODEL_ID
        return None if self.allows(str(value)) else MODEL_NOT_ALLOWED
