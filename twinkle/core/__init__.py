"""The functional environment API: states, the environment protocol, reward signals, the LLM
judge, answer extraction and cleaning, trajectories and branching.

The light types (state, environment, signals, tools) are imported eagerly; everything else
(judge, extraction, branching, the environment registry) loads on first attribute access
through a name table, so ``import twinkle.core`` never pulls in ``openai`` or starts anything.

Example:
    >>> from twinkle.core import Action, SignalBundle
    >>> Action.from_text("42").is_text_only, SignalBundle.single(1.0).total
    (True, 1.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twinkle.core.environment import Environment, EnvironmentSpec, PromptSource, StepResult
from twinkle.core.signals import RewardFunction, RewardType, Signal, SignalBundle
from twinkle.core.state import (
    Action,
    ImageContent,
    Observation,
    ObservationContent,
    ObservationImages,
    State,
    StateMetadata,
    find_ground_truth,
)
from twinkle.core.tools import ToolCall, ToolDefinition, ToolResult, ToolResultStatus
from twinkle.utils.lazy import lazy_getattr

_LAZY = {
    # judge and its model backend
    "JUDGE_TEMPLATES": "twinkle.core.judge",
    "JudgePromptTemplate": "twinkle.core.judge",
    "JudgeReward": "twinkle.core.judge",
    "extract_judge_score": "twinkle.core.judge",
    "ChatMessage": "twinkle.core.backend",
    "GenerationResult": "twinkle.core.backend",
    "ModelBackend": "twinkle.core.backend",
    "APIBackend": "twinkle.core.backend",
    "AdaptiveLimiter": "twinkle.core.ratelimit",
    # reward functions
    "FormatReward": "twinkle.core.reward",
    "StepPenalty": "twinkle.core.reward",
    # extraction and cleaning
    "AnswerExtractor": "twinkle.core.extraction",
    "CleanedExtractor": "twinkle.core.extraction",
    "EXTRACTORS": "twinkle.core.extraction",
    "resolve_cleaners": "twinkle.core.cleaning",
    # trajectories and branching
    "Checkpoint": "twinkle.core.trajectory",
    "Trajectory": "twinkle.core.trajectory",
    "Transition": "twinkle.core.trajectory",
    "BranchHandle": "twinkle.core.branching",
    "BranchManager": "twinkle.core.branching",
    "BranchingStrategy": "twinkle.core.branching",
    "CheckpointHandle": "twinkle.core.branching",
    # registries (environments through adapters)
    "Adapter": "twinkle.core.registry",
    "EnvironmentRegistry": "twinkle.core.registry",
    "Registry": "twinkle.core.registry",
    "environment_registry": "twinkle.core.registry",
}

__all__ = [
    "APIBackend",
    "Action",
    "Adapter",
    "AdaptiveLimiter",
    "AnswerExtractor",
    "BranchHandle",
    "BranchManager",
    "BranchingStrategy",
    "ChatMessage",
    "Checkpoint",
    "CheckpointHandle",
    "CleanedExtractor",
    "EXTRACTORS",
    "Environment",
    "EnvironmentRegistry",
    "EnvironmentSpec",
    "FormatReward",
    "GenerationResult",
    "ImageContent",
    "JUDGE_TEMPLATES",
    "JudgePromptTemplate",
    "JudgeReward",
    "ModelBackend",
    "Observation",
    "ObservationContent",
    "ObservationImages",
    "PromptSource",
    "Registry",
    "RewardFunction",
    "RewardType",
    "Signal",
    "SignalBundle",
    "State",
    "StateMetadata",
    "StepPenalty",
    "StepResult",
    "ToolCall",
    "ToolDefinition",
    "ToolResult",
    "ToolResultStatus",
    "Trajectory",
    "Transition",
    "environment_registry",
    "extract_judge_score",
    "find_ground_truth",
    "resolve_cleaners",
]

if TYPE_CHECKING:
    from twinkle.core.backend import APIBackend, ChatMessage, GenerationResult, ModelBackend
    from twinkle.core.branching import (
        BranchHandle,
        BranchingStrategy,
        BranchManager,
        CheckpointHandle,
    )
    from twinkle.core.cleaning import resolve_cleaners
    from twinkle.core.extraction import EXTRACTORS, AnswerExtractor, CleanedExtractor
    from twinkle.core.judge import (
        JUDGE_TEMPLATES,
        JudgePromptTemplate,
        JudgeReward,
        extract_judge_score,
    )
    from twinkle.core.ratelimit import AdaptiveLimiter
    from twinkle.core.registry import Adapter, EnvironmentRegistry, Registry, environment_registry
    from twinkle.core.reward import FormatReward, StepPenalty
    from twinkle.core.trajectory import Checkpoint, Trajectory, Transition


__getattr__ = lazy_getattr(__name__, _LAZY)
