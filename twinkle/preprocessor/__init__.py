"""Curation steps: ``QualityPreprocessor`` and its filters and mappers.

Each class lives in its own module and is imported on first use, so importing one light
filter never pulls in the heavier ones.
"""

from twinkle.preprocessor.base import Filter, Mapper, map_col_to_row, map_row_to_col
from twinkle.utils.lazy import lazy_getattr

_LAZY = {
    "QualityPreprocessor": "twinkle.preprocessor.quality",
    "truncate_dropped_logs": "twinkle.preprocessor.quality",
    "run_quality_pipeline": "twinkle.preprocessor.quality",
    "PipelineStats": "twinkle.preprocessor.quality",
    "build_pipeline": "twinkle.preprocessor.chain",
    "curate_rows": "twinkle.preprocessor.chain",
    "DedupFilter": "twinkle.preprocessor.dedup_filter",
    "NearDedupFilter": "twinkle.preprocessor.dedup_filter",
    "HardFilter": "twinkle.preprocessor.hard_filter",
    "DeadLoopFilter": "twinkle.preprocessor.dead_loop_filter",
    "RefuseFilter": "twinkle.preprocessor.refuse_filter",
    "TokenSoupFilter": "twinkle.preprocessor.token_soup",
    "ModelFilter": "twinkle.preprocessor.model_filter",
    "MessageNormalizer": "twinkle.preprocessor.message_normalizer",
    "PIIPresidioFilter": "twinkle.preprocessor.pii",
    "IntentClassifier": "twinkle.preprocessor.intent",
    "MessageSanityFilter": "twinkle.preprocessor.message_sanity",
    "ScoreFilter": "twinkle.preprocessor.score_filter",
    "ChrMinScorer": "twinkle.preprocessor.scorers",
    "SIFDScorer": "twinkle.preprocessor.scorers",
    "PassNScorer": "twinkle.preprocessor.scorers",
    "ParaphraseScorer": "twinkle.preprocessor.scorers",
    "OpenAIBackend": "twinkle.preprocessor.llm_backend",
    "SamplerBackend": "twinkle.preprocessor.llm_backend",
}

# Plain string literals, so linters and IDEs read the exports; tests/test_package.py checks
# that the list matches the eager names plus _LAZY.
__all__ = [
    "ChrMinScorer",
    "DeadLoopFilter",
    "DedupFilter",
    "Filter",
    "HardFilter",
    "IntentClassifier",
    "Mapper",
    "MessageNormalizer",
    "MessageSanityFilter",
    "ModelFilter",
    "NearDedupFilter",
    "OpenAIBackend",
    "PIIPresidioFilter",
    "ParaphraseScorer",
    "PassNScorer",
    "PipelineStats",
    "QualityPreprocessor",
    "RefuseFilter",
    "SIFDScorer",
    "SamplerBackend",
    "ScoreFilter",
    "TokenSoupFilter",
    "build_pipeline",
    "curate_rows",
    "map_col_to_row",
    "map_row_to_col",
    "run_quality_pipeline",
    "truncate_dropped_logs",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
