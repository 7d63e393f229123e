"""``ActionMapper``: a model's words ("left", "move down", "2") to a discrete action index.

Used by the mapping adapters (gymnasium): the extractor gives ``extracted_action``; the
mapper resolves it to the environment's action index, and ``format_action(index)`` gives
``resolved_action``, the action's native name. Stdlib only.

Resolution order: a bare index (``"2"``), then the whole text as a name or alias
(``"move down"``), then the last name or alias that occurs as a whole word in the text
("I go left, no, right" gives ``right``). Matching ignores case.

Example:
    >>> m = ActionMapper(["left", "down", "right", "up"],
    ...                  aliases={"down": ["south", "move down"], "up": ["north"]})
    >>> m.parse("Move down"), m.parse("0"), m.parse("go north!"), m.parse("jump")
    (1, 0, 3, None)
    >>> m.format_action(1)
    'down'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["ActionMapper"]

#: Distinct texts whose resolution is kept per mapper (a bound, for free-form replies).
_PARSE_CACHE = 4096


class ActionMapper:
    """Maps text to an action index of a ``Discrete(n)`` action space and back.

    Args:
        names: the native name of each action, by index.
        aliases: more words per action name (e.g. ``{"down": ["south"]}``).
        allow_index: accept a bare number as the index.
    """

    def __init__(
        self,
        names: Sequence[str],
        aliases: Mapping[str, Iterable[str]] | None = None,
        *,
        allow_index: bool = True,
    ) -> None:
        if not names:
            raise ValueError("an ActionMapper needs at least one action name")
        self.names = tuple(str(n) for n in names)
        self._allow_index = allow_index
        self._lookup: dict[str, int] = {}
        for index, name in enumerate(self.names):
            self._lookup[name.lower()] = index
            self._lookup[name.lower().replace("_", " ")] = index
        for name, words in (aliases or {}).items():
            if name.lower() not in self._lookup:
                raise KeyError(f"alias for unknown action {name!r}; actions: {self.names}")
            for word in words:
                self._lookup[str(word).lower()] = self._lookup[name.lower()]
        # longest phrases first, so "move down" wins over "down" at the same position
        words = sorted(self._lookup, key=len, reverse=True)
        self._parsed: dict[str, int | None] = {}
        self._pattern = re.compile(
            r"(?<![\w-])(" + "|".join(re.escape(w) for w in words) + r")(?![\w-])", re.IGNORECASE
        )

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def allow_index(self) -> bool:
        """Whether a bare number is read as the action index."""
        return self._allow_index

    @allow_index.setter
    def allow_index(self, value: bool) -> None:
        self._allow_index = value
        # Resolutions made under the other rule. A new dict, not a cleared one: its identity
        # stands for the current rules, which the gymnasium adapter's reply memo checks.
        self._parsed = {}

    def parse(self, text: str | None) -> int | None:
        """The action index ``text`` names, or None when it names none."""
        if text is None:
            return None
        # Policies repeat a few replies ("left", "move down"), so each text is resolved once.
        try:
            return self._parsed[text]
        except KeyError:
            pass
        index = self._resolve(text)
        if len(self._parsed) < _PARSE_CACHE:
            self._parsed[text] = index
        return index

    def _resolve(self, text: str) -> int | None:
        """:meth:`parse` without the cache."""
        s = text.strip().strip("`'\"*").strip().rstrip(".!").strip()
        if not s:
            return None
        if self._allow_index and s.lstrip("-").isdigit():
            index = int(s)
            return index if 0 <= index < self.n else None
        exact = self._lookup.get(s.lower())
        if exact is not None:
            return exact
        last = None
        for match in self._pattern.finditer(s):
            last = self._lookup[match.group(1).lower()]
        return last

    def format_action(self, index: int) -> str:
        """The native name of action ``index``."""
        return self.names[index]

    def describe(self) -> str:
        """``"left (0), down (1), ..."`` for prompts."""
        return ", ".join(f"{name} ({i})" for i, name in enumerate(self.names))

    def __repr__(self) -> str:
        return f"ActionMapper({list(self.names)})"
