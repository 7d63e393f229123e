"""The import path of :class:`PIIPresidioFilter` that ``twinkle.preprocessor.chain``, the
flows, the bench and pickled filters name; the code lives in :mod:`twinkle.preprocessor.pii`.

The helpers that the tests check directly are re-exported here too.

Example:
    >>> from twinkle.preprocessor.pii import PIIPresidioFilter as Filter
    >>> PIIPresidioFilter is Filter
    True
"""

from twinkle.preprocessor.pii import (
    CODE_SAFE_ENTITIES,
    DEFAULT_SPACY_MODELS,
    IDENTIFIER_ENTITIES,
    NAME_ENTITIES,
    WEAK_ENTITIES,
    PIIPresidioFilter,
    Strategy,
    TextFn,
)
from twinkle.preprocessor.pii.classify import _is_name_like as _is_name_like
from twinkle.preprocessor.pii.classify import _is_phone_like as _is_phone_like
from twinkle.preprocessor.pii.classify import _looks_like_prose as _looks_like_prose
from twinkle.preprocessor.pii.recognizers import _is_valid_cn_id as _is_valid_cn_id
from twinkle.preprocessor.pii.recognizers import _is_valid_luhn as _is_valid_luhn
from twinkle.preprocessor.pii.rewrite import _hash_short as _hash_short
from twinkle.preprocessor.pii.rewrite import _mask_keep_edges as _mask_keep_edges

__all__ = [
    "CODE_SAFE_ENTITIES",
    "DEFAULT_SPACY_MODELS",
    "IDENTIFIER_ENTITIES",
    "NAME_ENTITIES",
    "WEAK_ENTITIES",
    "PIIPresidioFilter",
    "Strategy",
    "TextFn",
]
