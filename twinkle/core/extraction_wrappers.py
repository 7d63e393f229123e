"""Extractors built from other extractors or functions: fallback chains, cleaning, filters.

Example:
    >>> from twinkle.core.extraction import BoxedExtractor, NumericExtractor
    >>> CompositeExtractor([BoxedExtractor(), NumericExtractor()]).extract("so 12")[0]
    '12'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from twinkle.core.cleaning import Cleaner, resolve_cleaners
from twinkle.core.extraction_base import AnswerExtractor, Extraction, not_text

__all__ = ["CleanedExtractor", "CompositeExtractor", "NativeExtractor", "SingleLineExtractor"]


class CompositeExtractor:
    """Try extractors in order; the first non-None answer (``""`` included) wins.

    Example:
        >>> from twinkle.core.extraction import BoxedExtractor, NumericExtractor
        >>> ex = CompositeExtractor([BoxedExtractor(), NumericExtractor()])
        >>> ex.extract("so 12")[1]["extractor_type"]
        'NumericExtractor'
    """

    def __init__(self, extractors: Sequence[AnswerExtractor] = ()) -> None:
        self.extractors = list(extractors)

    def extract(self, response: str) -> Extraction:
        for index, extractor in enumerate(self.extractors):
            answer, meta = extractor.extract(response)
            if answer is not None:
                meta = {
                    **meta,
                    "extractor_index": index,
                    "extractor_type": type(extractor).__name__,
                }
                return answer, meta
        return None, {
            "found": False,
            "tried_extractors": [type(e).__name__ for e in self.extractors],
        }


class NativeExtractor:
    """Wrap a third-party ``fn(response) -> answer | None`` (results become ``str``).

    Example:
        >>> NativeExtractor(lambda r: r.split()[-1] if r else None).extract("a b")[0]
        'b'
    """

    def __init__(self, fn: Callable[[str], Any], name: str = "native") -> None:
        self.fn = fn
        self.name = name

    def extract(self, response: str) -> Extraction:
        meta: dict[str, Any] = {"found": False, "format": "native", "native_name": self.name}
        try:
            result = self.fn(response)
        except Exception as exc:  # noqa: BLE001 - a foreign parser's failure is a failed extraction
            meta["error"] = f"{type(exc).__name__}: {exc}"
            return None, meta
        if result is None:
            return None, meta
        meta["found"] = True
        return str(result), meta


class SingleLineExtractor:
    """Accept the inner answer only if it is one non-empty line (and short enough).

    Example:
        >>> from twinkle.core.extraction import RawGenerationExtractor
        >>> SingleLineExtractor(RawGenerationExtractor()).extract("a\\nb")[1]["rejected_multiline"]
        True
    """

    def __init__(self, inner: AnswerExtractor, max_chars: int | None = None) -> None:
        self.inner = inner
        self.max_chars = max_chars

    def extract(self, response: str) -> Extraction:
        answer, meta = self.inner.extract(response)
        if answer is None:
            return None, meta
        answer = answer.strip()
        meta = dict(meta)
        if not answer:
            meta["found"] = False
            return None, meta
        if "\n" in answer:
            meta.update(found=False, rejected_multiline=True)
            return None, meta
        if self.max_chars is not None and len(answer) > self.max_chars:
            meta.update(found=False, rejected_too_long=True)
            return None, meta
        return answer, meta


def _cleaner_name(cleaner: Cleaner) -> str:
    return getattr(cleaner, "__name__", type(cleaner).__name__).lstrip("_")


class CleanedExtractor:
    """Wrap an extractor with pre-cleaners (on the response) and post-cleaners (on the answer).

    Cleaners are callables or the names / ``{type, config}`` dicts that
    :func:`twinkle.core.cleaning.resolve_cleaners` accepts. Metadata says which ran.

    Args:
        inner: the extractor to wrap.
        pre_cleaners: applied in order to the raw response.
        post_cleaners: applied in order to a found answer.

    Example:
        >>> from twinkle.core.extraction import TagBasedExtractor
        >>> ex = CleanedExtractor(TagBasedExtractor(), pre_cleaners=["strip_special_tokens"],
        ...                       post_cleaners=["strip_trailing_punctuation"])
        >>> ex.extract("<answer>42.</answer><|endoftext|>")[0]
        '42'
    """

    def __init__(
        self,
        inner: AnswerExtractor,
        pre_cleaners: Sequence[Cleaner | str | dict[str, Any]] = (),
        post_cleaners: Sequence[Cleaner | str | dict[str, Any]] = (),
    ) -> None:
        self.inner = inner
        self.pre_cleaners = self._resolve(pre_cleaners, "pre")
        self.post_cleaners = self._resolve(post_cleaners, "post")
        self._pre_names = [_cleaner_name(c) for c in self.pre_cleaners]
        self._post_names = [_cleaner_name(c) for c in self.post_cleaners]

    @staticmethod
    def _resolve(entries: Sequence[Any], kind: str) -> list[Cleaner]:
        return [e if callable(e) else resolve_cleaners([e], kind)[0] for e in entries]

    def extract(self, response: str) -> Extraction:
        if (bad := not_text(response)) is not None:
            return bad
        for clean in self.pre_cleaners:
            response = clean(response)
        answer, meta = self.inner.extract(response)
        ran_post = answer is not None and bool(self.post_cleaners)
        if answer is not None:
            for clean in self.post_cleaners:
                answer = clean(answer)
        meta = dict(meta)
        meta["pre_cleaners_applied"] = bool(self.pre_cleaners)
        meta["post_cleaners_applied"] = ran_post
        meta["pre_cleaners"] = self._pre_names
        meta["post_cleaners"] = self._post_names if ran_post else []
        return answer, meta
