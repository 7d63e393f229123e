"""The ``textarena`` adapter: TextArena's single-player games under the functional API.

A TextArena game reads its move from the model's text (the last ``[...]``); this adapter
reports that bracketed move as ``extracted_action`` (and ``resolved_action``), passes the
raw text to the game, and when the game ends gives its reward (``env.close()``, partial for
some losses) as the signal ``game_reward``; ``state.data`` has the game's end ``reason``.
Observations are TextArena's LLM view (the rules, then each move and the game's answer).

Listing reads the registered ids from TextArena's source without importing it, keeping the
games whose state is single-player (two-player games need an opponent policy; not here).

Example:
    >>> from twinkle.core.registry import environment_registry
    >>> env = environment_registry.get("GuessTheNumber-v0", adapter="textarena")
    >>> s, _ = env.reset(seed=0)
    >>> r = env.step(s, Action.from_text("My first guess is [10]"))
    >>> r.extracted_action, r.done
    ('10', False)
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
from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import Action, Observation, ObservationContent, State, StateMetadata

__all__ = ["TextArenaAdapter", "TextArenaEnvironment"]

_REGISTERED = re.compile(
    r"register(?:_with_versions)?\(\s*id\s*=\s*\"([^\"]+)\"\s*,\s*entry_point\s*=\s*"
    r"\"textarena\.envs\.([\w.]+):"
)
_MOVE = re.compile(r"\[([^\[\]]*)\]")


@dataclass(frozen=True)
class TextArenaHidden:
    seed: int | None
    view: str = ""  # TextArena's cumulative LLM view, to tell what each step added
    reward: float | None = None


class TextArenaEnvironment(EpisodeMembers):
    """One single-player TextArena game; ``**kwargs`` go to ``textarena.make``.

    Args:
        name: a TextArena id (``GuessTheNumber-v0``, ``Sudoku-v0-easy``, ``2048-v0-easy``...).
        max_steps: the step budget (default 100; games also end themselves).
        seed: the default reset seed (``task_index`` i uses ``seed + i``).
    """

    def __init__(self, name: str, *, max_steps: int = 100, seed: int = 0, **kwargs: Any):
        from twinkle.errors import require

        ta = require("textarena", "the 'textarena' environment adapter", "envs")
        self.env = ta.make(name, **kwargs)
        self._seed = seed
        self._tracker = _StateContinuityTracker()
        self._spec = EnvironmentSpec(
            name=name,
            adapter="textarena",
            max_steps=max_steps,
            observation_type="text",
            action_type="text",
            is_multi_turn=True,
            supports_len=False,
            pure_step=False,
            metadata={"kwargs": dict(kwargs)},
        )

    @staticmethod
    def _observation(text: str, messages: tuple, task: Any, data: dict) -> Observation:
        return Observation(text, messages, task=task, state=ObservationContent(text, data=data))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[TextArenaHidden], dict[str, Any]]:
        index = (options or {}).get("task_index")
        if seed is None:
            seed = self._seed + (index or 0)
        self.env.reset(num_players=1, seed=seed)
        _, view = self.env.get_observation()
        text = str(view).strip()
        task = ObservationContent(text=text)
        observation = self._observation(text, ({"role": "user", "content": text},), task, {})
        hidden = TextArenaHidden(seed, str(view))
        state = State(observation, hidden, StateMetadata(0, uuid.uuid4().hex))
        self._tracker.track(state)
        return state, {"seed": seed}

    def step(self, state: State[TextArenaHidden], action: Action) -> StepResult[TextArenaHidden]:
        self._tracker.validate(state, self._spec.name)
        if state.metadata.is_terminal:
            raise ValueError(f"{self._spec.name}: the game has ended; call reset()")
        text = action.text or ""
        moves = _MOVE.findall(text)
        extracted = moves[-1].strip() if moves else None
        done, _ = self.env.step(text)
        step = state.metadata.step + 1
        reward, data, view = None, {}, state.hidden.view
        if done:
            rewards, game_info = self.env.close()
            reward = float(rewards.get(0, 0.0))
            info0 = dict(game_info.get(0, {})) if isinstance(game_info, dict) else {}
            data = {k: v for k, v in info0.items() if isinstance(v, (str, int, float, bool))}
            reply = str(data.get("reason", "The game is over."))
        else:
            _, view = self.env.get_observation()
            view = str(view)
            # TextArena's LLM view repeats the whole history: the reply is what is new
            old = state.hidden.view
            reply = view[len(old) :].strip() if view.startswith(old) else view.strip()
        truncated = not done and step >= (self._spec.max_steps or step + 1)
        messages = (
            *state.observation.messages,
            {"role": "assistant", "content": text},
            {"role": "user", "content": reply},
        )
        observation = self._observation(reply, messages, state.observation.task, data)
        hidden = TextArenaHidden(state.hidden.seed, view, reward)
        next_state = State(
            observation,
            hidden,
            StateMetadata(step, state.metadata.episode_id, bool(done) or truncated, data),
        )
        self._tracker.track(next_state)
        signals = (Signal("game_reward", RewardType.OUTCOME, reward or 0.0, metadata=data),)
        return StepResult(
            next_state=next_state,
            rewards=SignalBundle(signals),
            terminated=bool(done),
            truncated=truncated,
            extracted_action=extracted,
            resolved_action=extracted,
            info=data,
        )

    def compute_rewards(
        self, state: State[TextArenaHidden], action: Action, next_state: State[TextArenaHidden]
    ) -> SignalBundle:
        reward = next_state.hidden.reward or 0.0
        return SignalBundle((Signal("game_reward", RewardType.OUTCOME, reward),))


class TextArenaAdapter(BaseAdapter):
    """Adapter over ``textarena``'s single-player games (``twinkle[envs]``).

    Example:
        >>> adapter = TextArenaAdapter()
        >>> not adapter.installed() or "Sudoku-v0" in adapter.list_environments()
        True
    """

    name = "textarena"
    requires = ("textarena",)

    def __init__(self) -> None:
        self._ids: list[str] | None = None

    def list_environments(self) -> list[str]:
        if self._ids is None:
            spec = importlib.util.find_spec("textarena") if self.installed() else None
            if spec is None or spec.origin is None:
                return []
            root = Path(spec.origin).parent
            source = (root / "envs" / "__init__.py").read_text(encoding="utf-8")
            single: dict[str, bool] = {}
            ids = []
            for env_id, module in _REGISTERED.findall(source):
                if module not in single:
                    path = root / "envs" / Path(*module.split(".")).with_suffix(".py")
                    code = path.read_text(encoding="utf-8") if path.is_file() else ""
                    single[module] = "SinglePlayerState" in code
                if single[module]:
                    ids.append(env_id)
            self._ids = sorted(ids)
        return list(self._ids)

    def get_environment(self, name: str, **config: Any) -> TextArenaEnvironment:
        self.ensure_installed()
        return TextArenaEnvironment(name, **config)

    def get_environment_info(self, name: str) -> dict[str, Any]:
        info = super().get_environment_info(name)
        info["description"] = f"TextArena single-player game '{name}'"
        return info
