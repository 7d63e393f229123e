"""PII rewriting for conversations: :class:`PIIPresidioFilter` and its parts.

Detection leans on Microsoft Presidio (its recognizer registry, pattern recognizers with
checksum validation, ``phonenumbers``-based phone matching and its spaCy NER bridge) so that
twinkle keeps no regex zoo of its own beyond what Presidio lacks: Chinese identifiers, ASCII-
bounded e-mail/IPv4 patterns that also work inside CJK text, and API-key-like secrets.
English names, places and organisations come from spaCy NER, Chinese ones from jieba
part-of-speech tags. Pseudonyms come from Faker.

Agent rows must still replay in a sandbox after the rewrite, so text is split in two kinds.
Prose (system, user and assistant text, reasoning, and tool-call values or tool outputs that
read as prose, such as a note written with ``write_file``) gets NER and every recognizer.
Code (commands, paths, program text, JSON structure) gets only the strong identifiers: e-mail,
API keys, cards and UnionPay numbers with Luhn, IBAN, IP, CN ID with checksum and phones in a
phone-like format. Presidio's recognizers that fire on ordinary digits (``US_BANK_NUMBER``,
``UK_NHS``, ...) are off unless asked for, and then run on prose only. A value found once is
rewritten everywhere in its row (names only in prose, and only name-shaped ones); a name that
a command or program of the row holds is left alone, since the command keeps it anyway and a
tool output it printed must still match. JSON text is rewritten value by value in place, so a
file and its read-back stay byte-identical. Japanese and Korean text gets no NER (no model here
reads it; English NER and jieba turn its words into names).

The Presidio engine is built lazily, once per process and per model configuration, and shared
by every filter instance; the filter itself stays cheap to construct and pickles for Ray or
Prefect workers. Importing this package imports none of Presidio, spaCy, jieba or Faker.

Modules:
    ``filter``: :class:`PIIPresidioFilter`, the batch analysis and the per-row rewrite.
    ``engine``: the Presidio analyzer, spaCy pipelines and the jieba tagger.
    ``recognizers``: entity groups, Twinkle's pattern recognizers and checksum validators.
    ``classify``: language, prose-or-code and name-shape tests.
    ``rewrite``: :class:`Strategy`, pseudonyms, and the walk over a message's fields.
    ``tables``: the word lists and label tables under ``data/``.
"""

from twinkle.preprocessor.pii.engine import DEFAULT_SPACY_MODELS
from twinkle.preprocessor.pii.filter import PIIPresidioFilter
from twinkle.preprocessor.pii.recognizers import (
    CODE_SAFE_ENTITIES,
    IDENTIFIER_ENTITIES,
    NAME_ENTITIES,
    WEAK_ENTITIES,
)
from twinkle.preprocessor.pii.rewrite import Strategy, TextFn

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
