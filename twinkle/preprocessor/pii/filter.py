"""``PIIPresidioFilter``: find personal data in conversations and rewrite it.

Analysis runs once per distinct text over a whole batch (system prompts and tool schemas
repeat a lot); a value found once is then rewritten everywhere in its row. The pieces live
beside this module: the engine (``engine``), the custom recognizers (``recognizers``), the
text and span tests (``classify``) and the rewriting of values and message fields
(``rewrite``).

Rows are never mutated; rewritten copies are returned. Drop reasons: ``malformed_row``,
``malformed_messages``, ``malformed_empty_messages`` (from the base contract) and
``pii_error:<Exception>`` when analysing or rewriting a row fails.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from twinkle.preprocessor.base import Mapper, Row, drop, malformed_reason, map_col_to_row
from twinkle.preprocessor.pii.classify import (
    _ANY_SIGNAL_RE,
    _HAN_RE,
    _detect_language,
    _is_name_like,
    _is_phone_like,
    _trim_sentence_opener,
)
from twinkle.preprocessor.pii.engine import (
    _JIEBA_LANGUAGES,
    DEFAULT_SPACY_MODELS,
    _engine,
    _jieba_spans,
    _nlp_artifacts,
    _require,
)
from twinkle.preprocessor.pii.recognizers import (
    _MIN_SPAN,
    _SCORE_FLOOR,
    _VALIDATORS,
    CODE_SAFE_ENTITIES,
    IDENTIFIER_ENTITIES,
    NAME_ENTITIES,
)
from twinkle.preprocessor.pii.rewrite import (
    Strategy,
    TextFn,
    _fake_value,
    _hash_short,
    _mask_all,
    _mask_keep_edges,
    _pseudonym_seed,
    _rewrite_message,
    _row_pattern,
    rewrite_keys,
    rewrite_number,
)

__all__ = ["PIIPresidioFilter"]

#: Row fields the ``all_fields`` walk passes through: the messages have their own walk.
_NOT_WALKED = ("messages", "_pii_hits")

logger = logging.getLogger("twinkle.preprocessor")


class _RowFailed(Exception):
    """A text of this row could not be analysed."""


class _RowCache(dict):
    """The pseudonyms of one row when they are not shared (``consistency=False``); ``n``
    varies their seeds from row to row."""

    n = 0


class PIIPresidioFilter(Mapper):
    """Rewrite personal data in every message: text, reasoning, tool arguments and outputs.

    Identifiers (phone, card with Luhn, IBAN, IP, CN ID with checksum, API keys, passwords
    and secrets given in text such as "password: hunter2", ...) take ``default_strategy``
    (mask: every letter and digit starred, separators kept, so "078-05-1120" becomes
    "***-**-****"); e-mails and PERSON / LOCATION / ORGANIZATION get Faker pseudonyms.
    A pseudonym is a function of the value and ``hash_salt`` (and ``seed``) only, so
    rerunning curation on the same input gives byte-identical output whatever the batching,
    and the same value gets the same pseudonym in every row; with ``consistency=False``
    each row gets its own (still deterministic) pseudonym. Names are
    looked for in prose only: commands, paths and code in tool calls and tool outputs keep
    every byte except strong identifiers, so a rewritten agent row still replays.

    Args:
        languages: languages to analyse; each text is routed to ``zh`` when more than 15% of
            its characters are Han, else to ``en`` (or the first language configured).
        spacy_models: overrides of ``DEFAULT_SPACY_MODELS`` (``blank:xx`` = no NER).
        entity_strategy: per-entity overrides, e.g. ``{'PERSON': 'hash'}``; a new entity
            name is analysed too when some recognizer supports it (``WEAK_ENTITIES`` are
            turned on this way, for prose only).
        default_strategy: strategy of the identifier entities.
        score_threshold: minimum Presidio score of a span.
        roles: roles whose messages are rewritten.
        consistency: share pseudonyms across all rows of one call.
        persistent_consistency: share pseudonyms across calls of this instance.
        hash_salt: salt of the ``hash`` strategy and of the pseudonyms: another salt gives
            other pseudonyms (so they cannot be looked up from a known table).
        record_counts: store ``{entity: count}`` in ``row['_pii_hits']``.
        seed: mixed into the pseudonym seeds (None and 0 give the same pseudonyms).
        mask_head, mask_tail: characters the ``mask`` strategy keeps at each end (the seed
            kept 3 and 4, which shows 7 of an 11-digit phone number); 0 and 0, the default,
            star every letter and digit.
        all_fields: also rewrite every string outside ``messages`` and ``tools`` (``id``,
            ``customer_email``, ``metadata.phone``, ...), at any depth: a string with a
            space as prose, one without (ids, keys) as code (strong identifiers only).

    Example:
        >>> f = PIIPresidioFilter(languages=['en', 'zh'], seed=0)
        >>> rows, dropped = f([{'messages': [
        ...     {'role': 'user', 'content': 'I am John Smith, card 4111 1111 1111 1111.'}]}])
        >>> 'John Smith' in rows[0]['messages'][0]['content'], dropped
        (False, [])
    """

    def __init__(
        self,
        languages: Iterable[str] = ("en", "zh"),
        spacy_models: Mapping[str, str] | None = None,
        entity_strategy: Mapping[str, Strategy | str] | None = None,
        default_strategy: Strategy | str = Strategy.MASK,
        score_threshold: float = 0.5,
        roles: Iterable[str] = ("system", "developer", "user", "assistant", "tool"),
        consistency: bool = True,
        persistent_consistency: bool = False,
        hash_salt: str = "",
        record_counts: bool = False,
        seed: int | None = None,
        mask_head: int = 0,
        mask_tail: int = 0,
        all_fields: bool = False,
    ) -> None:
        self.all_fields = all_fields
        self.languages = tuple(languages)
        if not self.languages:
            raise ValueError("languages must name at least one language, got none")
        self._jieba_too = bool(_JIEBA_LANGUAGES & set(self.languages))
        models = {**DEFAULT_SPACY_MODELS, **(spacy_models or {})}
        for lang in self.languages:
            if lang not in models:
                raise ValueError(f"No spaCy model configured for language {lang!r}")
        self.models = tuple((lang, models[lang]) for lang in self.languages)
        if not 0.0 <= score_threshold <= 1.0:
            raise ValueError(f"score_threshold must be within [0, 1], got {score_threshold!r}")
        self.score_threshold = score_threshold
        self.default_strategy = Strategy.coerce(default_strategy)
        self.strategies: dict[str, Strategy] = dict.fromkeys(
            IDENTIFIER_ENTITIES, self.default_strategy
        )
        self.strategies.update(dict.fromkeys(("EMAIL_ADDRESS", *NAME_ENTITIES), Strategy.REPLACE))
        for entity, strategy in (entity_strategy or {}).items():
            self.strategies[entity.upper()] = Strategy.coerce(strategy)
        self.roles = frozenset(roles)
        self.consistency = consistency
        self.persistent_consistency = persistent_consistency
        self.hash_salt = hash_salt
        self.record_counts = record_counts
        self.seed = seed
        for name, value in (("mask_head", mask_head), ("mask_tail", mask_tail)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        self.mask_head = mask_head
        self.mask_tail = mask_tail
        needed = ["presidio_analyzer", "spacy", "faker"]
        needed += ["jieba"] if self._jieba_too else []
        _require(*needed)
        self._fakers: dict[str, Any] = {}
        self._persistent: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fakers"] = {}  # rebuilt on first use in the worker
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- analysis ---------------------------------------------------------------------------

    def _entities(self, engine: Any, lang: str, prose: bool) -> list[str]:
        supported = set(engine.get_supported_entities(language=lang))
        wanted = self.strategies if prose else CODE_SAFE_ENTITIES & set(self.strategies)
        return sorted(e for e in wanted if e in supported)

    def analyze(
        self, texts: Iterable[str], prose: bool = True
    ) -> dict[str, list[tuple[int, int, str]] | Exception]:
        """Non-overlapping ``(start, end, entity)`` spans for each distinct text.

        ``prose=False`` treats the texts as code (commands, paths, program text): only e-mails
        and the strong identifiers are looked for, never names. A text whose analysis raised
        maps to the exception instead of spans.
        """
        found = self._analyze((t, prose) for t in texts)
        return {t: spans for (t, _), spans in found.items()}

    def _analyze(
        self, jobs: Iterable[tuple[str, bool]]
    ) -> dict[tuple[str, bool], list[tuple[int, int, str]] | Exception]:
        # Groups of (language, with NER): prose in a language we have NER for gets the full
        # analysis; code, and prose in other scripts, only the pattern recognizers.
        groups: dict[tuple[str, bool], list[tuple[str, bool]]] = {}
        out: dict[tuple[str, bool], list[tuple[int, int, str]] | Exception] = {}
        for job in dict.fromkeys(jobs):
            text, prose = job
            if not _ANY_SIGNAL_RE.search(text):
                out[job] = []
                continue
            lang = _detect_language(text, self.languages) if prose else None
            group = (lang, True) if lang is not None else (self.languages[0], False)
            groups.setdefault(group, []).append(job)
        engine = _engine(self.models) if groups else None
        for (lang, ner), group in groups.items():
            entities = self._entities(engine, lang, prose=ner)
            texts = [text for text, _ in group]
            for job, artifacts in zip(group, _nlp_artifacts(engine, lang, texts, ner)):
                text, prose = job
                try:
                    if isinstance(artifacts, Exception):
                        raise artifacts
                    found = [
                        (r.start, r.end, r.entity_type, r.score)
                        for r in engine.analyze(
                            text,
                            lang,
                            entities=entities,
                            score_threshold=0.0,
                            nlp_artifacts=artifacts,
                        )
                    ]
                    # A Chinese name in text routed elsewhere ("Regards, Ann. 联系人：王小明")
                    # is no word of that language's NER: jieba tags it.
                    if ner and self._jieba_too and _HAN_RE.search(text):
                        found += [s for s in _jieba_spans(text) if s[2] in self.strategies]
                    out[job] = self._resolve(text, found, prose)
                except Exception as exc:  # noqa: BLE001 - one bad text fails its rows only
                    logger.debug("PII analysis failed: %r", exc)
                    out[job] = exc
        return out

    def _resolve(
        self, text: str, found: list[tuple[int, int, str, float]], prose: bool = True
    ) -> list[tuple[int, int, str]]:
        accepted = []
        for start, end, entity, score in found:
            if entity not in self.strategies or end - start < _MIN_SPAN.get(entity, 3):
                continue
            if not prose and entity not in CODE_SAFE_ENTITIES:
                continue
            if entity in NAME_ENTITIES:
                start = _trim_sentence_opener(text, start, end)
                if not _is_name_like(text, start, end, entity):
                    continue
            if entity == "PHONE_NUMBER" and not _is_phone_like(text[start:end], prose):
                continue
            validator = _VALIDATORS.get(entity)
            if validator is not None:
                if not validator(text[start:end]):
                    continue
                score = 1.0
            elif score < min(self.score_threshold, _SCORE_FLOOR.get(entity, 1.0)):
                continue
            accepted.append((start, end, entity, score))
        # Greedy: identifiers before NER guesses (NER likes to call "IP 10.0.0.1" an ORG), then
        # best score, longest, leftmost; a span overlapping one already kept goes.
        kept: list[tuple[int, int, str]] = []
        order = sorted(accepted, key=lambda s: (s[2] in NAME_ENTITIES, -s[3], s[0] - s[1], s[0]))
        for start, end, entity, _ in order:
            if all(end <= ks or start >= ke for ks, ke, _ in kept):
                kept.append((start, end, entity))
        return sorted(kept)

    # -- rewriting --------------------------------------------------------------------------

    def _faker(self, lang: str) -> Any:
        with self._lock:
            if lang not in self._fakers:
                from faker import Faker

                self._fakers[lang] = Faker("zh_CN" if lang == "zh" else "en_US")
            return self._fakers[lang]

    def _pseudonym(self, entity: str, original: str, lang: str, n: int) -> str:
        fake = self._faker(lang)
        salt = self.hash_salt if not self.seed else f"{self.hash_salt}\x00{self.seed}"
        with self._lock:  # one generator per language: seed and draw together
            fake.seed_instance(_pseudonym_seed(salt, entity, original, n))
            return _fake_value(fake, entity, original)

    def _rewrite_span(
        self, entity: str, original: str, lang: str, cache: dict[tuple[str, str], str]
    ) -> str:
        strategy = self.strategies[entity]
        if strategy is Strategy.MASK:
            if self.mask_head or self.mask_tail:
                return _mask_keep_edges(original, self.mask_head, self.mask_tail)
            return _mask_all(original)
        if strategy is Strategy.HASH:
            return f"<{entity}:{_hash_short(original, self.hash_salt)}>"
        if strategy is Strategy.REDACT:
            return ""
        key = (entity, original)
        if key not in cache:
            cache[key] = self._pseudonym(entity, original, lang, getattr(cache, "n", 0))
        return cache[key]

    def _rewrite_text(
        self,
        text: str,
        spans: list[tuple[int, int, str]],
        row_values: dict[str, str],
        pattern: re.Pattern[str] | None,
        cache: dict[tuple[str, str], str],
        hits: Counter[str],
    ) -> str:
        if pattern is not None:
            # A value found anywhere in the row is rewritten everywhere it may be, also where
            # the recognizers missed it (a name inside a tool output, a bare city in reasoning).
            extra = [
                (m.start(), m.end(), row_values[m.group()])
                for m in pattern.finditer(text)
                if all(m.end() <= s or m.start() >= e for s, e, _ in spans)
            ]
            spans = sorted(spans + extra)
        if not spans:
            return text
        lang = "zh" if _detect_language(text, ("en", "zh")) == "zh" else "en"
        pieces, last = [], 0
        for start, end, entity in spans:
            # One entity per value in the row, so one pseudonym even when NER labels differ.
            entity = row_values.get(text[start:end], entity)
            value = text[start:end]
            # A Chinese name in English text gets a Chinese pseudonym.
            value_lang = "zh" if lang == "en" and _HAN_RE.search(value) else lang
            pieces += [text[last:start], self._rewrite_span(entity, value, value_lang, cache)]
            last = end
            hits[entity] += 1
        pieces.append(text[last:])
        return "".join(pieces)

    def map_row(self, row: Row) -> Row:
        """Rewrite one row (the batched ``__call__`` is much faster for many rows)."""
        kept, dropped = self([row])
        if dropped:
            raise ValueError(dropped[0]["drop_reason"])
        return kept[0]

    def _walk(self, row: Row, fn: TextFn) -> list[Any]:
        return [
            _rewrite_message(m, fn) if isinstance(m, dict) and m.get("role") in self.roles else m
            for m in row["messages"]
        ]

    def _walk_fields(self, row: Row, fn: TextFn) -> dict[str, Any]:
        """With ``all_fields``, the row with ``fn`` applied to each string, key and number long
        enough to be an identifier (``rewrite_number``) of its fields but the messages. Tool schemas
        (``tools``) are developer text shared by many rows: only strong identifiers there,
        no NER, whose false hits would then be rewritten in every row's prose."""
        if not self.all_fields:
            return {}

        def walk(value: Any, prose_ok: bool = True) -> Any:
            if isinstance(value, str):
                return fn(value, prose_ok and " " in value.strip())
            if isinstance(value, dict):
                return rewrite_keys(
                    {k: walk(v, prose_ok) for k, v in value.items()},
                    lambda k: fn(k, prose_ok and " " in k.strip()),
                )
            if isinstance(value, (list, tuple)):
                return [walk(v, prose_ok) for v in value]
            return rewrite_number(value, fn)

        return rewrite_keys(  # the messages (their own walk) pass through in place
            {k: v if k in _NOT_WALKED else walk(v, k != "tools") for k, v in row.items()},
            lambda k: k if k in _NOT_WALKED else fn(k, False),
        )

    def _texts(self, row: Row) -> list[tuple[str, bool]]:
        """Every ``(text, prose)`` the row holds, in walking order."""
        jobs: list[tuple[str, bool]] = []

        def collect(text: str, prose: bool) -> str:
            jobs.append((text, prose))
            return text

        self._walk(row, collect)
        self._walk_fields(row, collect)
        return jobs

    def _rewrite_row(
        self,
        row: Row,
        jobs: list[tuple[str, bool]],
        analysis: dict[tuple[str, bool], Any],
        cache: dict[tuple[str, str], str],
    ) -> Row:
        names: dict[str, str] = {}
        identifiers: dict[str, str] = {}
        for job in jobs:
            spans = analysis[job]
            if isinstance(spans, Exception):
                raise _RowFailed(type(spans).__name__) from spans
            text = job[0]
            for start, end, entity in spans:
                found = names if entity in NAME_ENTITIES else identifiers
                found.setdefault(text[start:end], entity)
        # A name that a command or program text of this row holds stays everywhere: code is
        # never rewritten, so hiding the name elsewhere would hide nothing, and a tool output
        # that the code printed would no longer match a replay.
        name_pattern = _row_pattern(names)
        pinned = {
            m.group()
            for text, prose in jobs
            if not prose and name_pattern is not None
            for m in name_pattern.finditer(text)
        }
        prose_values = {v: e for v, e in names.items() if v not in pinned}
        prose_values.update(identifiers)
        # Strong identifiers propagate into every text; names and weak ones only into prose.
        code_values = {v: e for v, e in identifiers.items() if e in CODE_SAFE_ENTITIES}
        patterns = {True: _row_pattern(prose_values), False: _row_pattern(code_values)}
        hits: Counter[str] = Counter()

        def rewrite(text: str, prose: bool) -> str:
            spans = [s for s in analysis[(text, prose)] if text[s[0] : s[1]] not in pinned]
            values = prose_values if prose else code_values
            return self._rewrite_text(text, spans, values, patterns[prose], cache, hits)

        new_row = self._walk_fields(row, rewrite) if self.all_fields else dict(row)
        new_row["messages"] = self._walk(row, rewrite)
        if self.record_counts:
            if hits:
                new_row["_pii_hits"] = dict(hits)
            else:
                new_row.pop("_pii_hits", None)
        return new_row

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        rows = map_col_to_row(rows)
        # Pass 1 collects every text of every row, so that analysis runs once per distinct
        # text over the whole batch (system prompts and tool schemas repeat a lot).
        row_texts: list[list[tuple[str, bool]] | str] = []  # the texts, or why the row goes
        for row in rows:
            reason = malformed_reason(row)
            if reason is not None:
                row_texts.append(reason)
                continue
            try:
                row_texts.append(self._texts(row))
            except Exception as exc:  # noqa: BLE001 - a row that cannot be walked drops alone
                row_texts.append(f"pii_error:{type(exc).__name__}")
        analysis = self._analyze(
            job for jobs in row_texts if isinstance(jobs, list) for job in jobs
        )

        call_cache: dict[tuple[str, str], str] = (
            self._persistent if self.persistent_consistency else {}
        )
        kept: list[Row] = []
        dropped: list[Row] = []
        for n, (row, texts) in enumerate(zip(rows, row_texts), 1):
            if isinstance(texts, str):
                dropped.append(drop(row, texts))
                continue
            cache = call_cache
            if not (self.consistency or self.persistent_consistency):
                cache = _RowCache()
                cache.n = n  # each row of the call its own pseudonyms, still reproducible
            try:
                kept.append(self._rewrite_row(row, texts, analysis, cache))
            except _RowFailed as exc:
                dropped.append(drop(row, f"pii_error:{exc}"))
            except Exception as exc:  # noqa: BLE001 - one broken row must never stop the batch
                dropped.append(drop(row, f"pii_error:{type(exc).__name__}"))
        return kept, dropped
