"""The ``gem`` adapter: GEM's text environments (``gem-llm``) under the functional API.

A GEM env takes the model's text and reads its own action from it (the last ``\\boxed{}``);
this adapter reports that same ``\\boxed{}`` content as ``extracted_action`` (and, GEM being
extraction-only in the seed's table, as ``resolved_action``), steps the env with the raw text
and gives GEM's step reward as the signal ``gem_reward``. Games (``game:GuessTheNumber-v0``,
``game:Wordle-v0``...) are multi-turn; ``rg:*`` wraps reasoning-gym single-turn.
``math:``/``qa:``/``code:``/``eval:`` ids download their data from the Hugging Face Hub.

``gem-llm`` 0.1.0 pins ``reasoning_gym==0.1.23``, which would downgrade reasoning-gym, so
the ``envs`` extra leaves it out; ``pip install 'gem-llm==0.0.3'`` resolves beside it.

Listing reads the ids from GEM's source without importing it (``import gem`` imports
reasoning-gym, about a second).

Example:
    >>> adapter = GemAdapter()
    >>> adapter.installed() or adapter.list_environments() == []
    True
"""

from __future__ import annotations

import importlib.util
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinkle.core.adapters._common import BaseAdapter, EpisodeMembers
from twinkle.core.environment import EnvironmentSpec, StepResult, _StateContinuityTracker
from twinkle.core.extraction import BoxedExtractor, CleanedExtractor
from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import Action, Observation, ObservationContent, State, StateMetadata
from twinkle.errors import EnvError

__all__ = ["GemAdapter", "GemEnvironment"]

_LITERAL_ID = re.compile(r"register\(\s*\"([^\"]+)\"")
CONFLICT = "gem-llm 0.1.0 pins reasoning_gym==0.1.23; install gem-llm==0.0.3"


@dataclass(frozen=True)
class GemHidden:
    total_reward: float
    seed: int | None


class GemEnvironment(EpisodeMembers):
    """One GEM environment; ``**kwargs`` go to ``gem.make``.

    Args:
        name: a GEM id (``game:GuessTheNumber-v0``, ``rg:leg_counting``...).
        max_steps: the step budget (default 50; GEM games also end themselves).
        seed: the default reset seed (``task_index`` i uses ``seed + i``).
    """

    def __init__(
        self,
        name: str,
        *,
        max_steps: int = 50,
        seed: int = 0,
        system_prompt: str | None = None,
        pre_cleaners: Any = None,
        post_cleaners: Any = None,
        **kwargs: Any,
    ) -> None:
        from twinkle.errors import require

        gem = require("gem", f"the 'gem' adapter ({CONFLICT})", None, package="gem-llm==0.0.3")
        try:
            self.env = gem.make(name, **kwargs)
        except LookupError as exc:  # nltk corpora (Wordle, Hangman) are downloaded, not bundled
            raise EnvError(
                f"gem environment {name!r} needs nltk data that is not installed; run "
                "python -m nltk.downloader words (where the network is reachable)"
            ) from exc
        self._seed = seed
        self._system_prompt = system_prompt
        self.set_cleaners(pre_cleaners, post_cleaners)
        self._tracker = _StateContinuityTracker()
        self._spec = EnvironmentSpec(
            name=name,
            adapter="gem",
            max_steps=max_steps,
            observation_type="text",
            action_type="text",
            is_multi_turn=not name.startswith("rg:"),
            supports_len=False,
            pure_step=False,
            metadata={"kwargs": dict(kwargs)},
        )

    def set_cleaners(self, pre: Any = None, post: Any = None) -> None:
        self.extractor = CleanedExtractor(
            BoxedExtractor(),
            pre_cleaners=("strip_special_tokens", "strip_thinking_tokens") if pre is None else pre,
            post_cleaners=() if post is None else post,
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[GemHidden], dict[str, Any]]:
        index = (options or {}).get("task_index")
        if seed is None:
            seed = self._seed + (index or 0)
        obs, info = self.env.reset(seed=seed)
        prompt = str(obs)
        if info.get("suffix"):
            prompt = f"{prompt}\n{info['suffix']}"
        messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": prompt},)
        if self._system_prompt:
            messages = ({"role": "system", "content": self._system_prompt}, *messages)
        content = ObservationContent(text=prompt)
        observation = Observation(prompt, messages, task=content, state=content)
        state = State(observation, GemHidden(0.0, seed), StateMetadata(0, uuid.uuid4().hex))
        self._tracker.track(state)
        return state, {"seed": seed, **_plain_info(info)}

    def step(self, state: State[GemHidden], action: Action) -> StepResult[GemHidden]:
        self._tracker.validate(state, self._spec.name)
        if state.metadata.is_terminal:
            raise ValueError(f"{self._spec.name}: the episode has ended; call reset()")
        text = action.text or ""
        extracted, _ = self.extractor.extract(text)
        obs, reward, terminated, truncated, info = self.env.step(text)
        reward = float(reward)
        step = state.metadata.step + 1
        truncated = bool(truncated) and not terminated
        if not terminated and step >= (self._spec.max_steps or step + 1):
            truncated = True
        prompt = str(obs)
        if info.get("suffix"):
            prompt = f"{prompt}\n{info['suffix']}"
        messages = (
            *state.observation.messages,
            {"role": "assistant", "content": text},
            {"role": "user", "content": prompt},
        )
        observation = Observation(
            prompt, messages, task=state.observation.task, state=ObservationContent(text=prompt)
        )
        hidden = GemHidden(state.hidden.total_reward + reward, state.hidden.seed)
        done = bool(terminated) or truncated
        next_state = State(
            observation,
            hidden,
            StateMetadata(step, state.metadata.episode_id, done, {"extracted_answer": extracted}),
        )
        self._tracker.track(next_state)
        return StepResult(
            next_state=next_state,
            rewards=SignalBundle((Signal("gem_reward", RewardType.OUTCOME, reward),)),
            terminated=bool(terminated),
            truncated=truncated,
            extracted_action=extracted,
            resolved_action=extracted,
            info=_plain_info(info),
        )

    def compute_rewards(
        self, state: State[GemHidden], action: Action, next_state: State[GemHidden]
    ) -> SignalBundle:
        gained = next_state.hidden.total_reward - state.hidden.total_reward
        return SignalBundle((Signal("gem_reward", RewardType.OUTCOME, gained),))


def _plain_info(info: Any) -> dict[str, Any]:
    return {str(k): v for k, v in dict(info or {}).items() if isinstance(v, (str, int, float))}


class GemAdapter(BaseAdapter):
    """Adapter over ``gem-llm`` (``pip install 'gem-llm==0.0.3'``; see :data:`CONFLICT`)."""

    name = "gem"
    requires = ("gem", "reasoning_gym")
    conflict = CONFLICT
    extra = None  # gem-llm needs Python <= 3.12 and an old version: not in 'envs'
    package = "gem-llm==0.0.3"

    def __init__(self) -> None:
        self._ids: list[str] | None = None

    def list_environments(self) -> list[str]:
        if self._ids is None:
            spec = importlib.util.find_spec("gem") if self.installed() else None
            if spec is None or spec.origin is None:
                return []
            source = Path(spec.origin).parent / "envs" / "__init__.py"
            text = source.read_text(encoding="utf-8") if source.is_file() else ""
            ids = set(_LITERAL_ID.findall(text))
            if "rg:{name}" in text:
                from twinkle.core.adapters.reasoning_gym import ReasoningGymAdapter

                ids |= {f"rg:{n}" for n in ReasoningGymAdapter().list_environments()}
            self._ids = sorted(ids)
        return list(self._ids)

    def get_environment(self, name: str, **config: Any) -> GemEnvironment:
        self.ensure_installed()
        return GemEnvironment(name, **config)

    def get_environment_info(self, name: str) -> dict[str, Any]:
        info = super().get_environment_info(name)
        info["description"] = f"GEM environment '{name}'"
        info["install"] = "pip install 'gem-llm==0.0.3'"
        return info
