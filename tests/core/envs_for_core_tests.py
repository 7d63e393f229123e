"""Small environments used by the core tests (a module of its own so forks can pickle them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twinkle.core.environment import EnvironmentSpec, StepResult, _StateContinuityTracker
from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import Action, Observation, State, StateMetadata
from twinkle.core.tools import ToolDefinition, ToolResult, ToolResultStatus


@dataclass(frozen=True)
class CounterHidden:
    total: int
    expected_answer: str = "3"


class CounterEnv:
    """Non-pure: keeps a mutable step counter inside the env (not in the state)."""

    def __init__(self, tasks: int = 4) -> None:
        self.tasks = tasks
        self.counter = 0
        self.closed = False
        self._tracker = _StateContinuityTracker()
        self._spec = EnvironmentSpec("counter", adapter="test", is_multi_turn=True, max_steps=10)

    @property
    def spec(self) -> EnvironmentSpec:
        return self._spec

    @property
    def reward_functions(self) -> tuple[Any, ...]:
        return ()

    @property
    def available_tools(self) -> tuple[ToolDefinition, ...]:
        return (
            ToolDefinition(
                "add", "Add a number", {"type": "object", "properties": {"n": {"type": "integer"}}}
            ),
        )

    @property
    def prompts(self) -> dict[str, str]:
        return {"system": "count"}

    def __len__(self) -> int:
        return self.tasks

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        index = (options or {}).get("task_index", 0)
        state = State(
            Observation(prompt=f"task {index}: add numbers"),
            CounterHidden(total=index),
            StateMetadata(0, f"ep-{seed}-{index}"),
        )
        self._tracker.track(state)
        return state, {"task_index": index}

    def step(self, state: State[CounterHidden], action: Action) -> StepResult[CounterHidden]:
        self._tracker.validate(state, self.spec.name)
        self.counter += 1
        n = int(action.text) if action.text and action.text.strip().lstrip("-").isdigit() else 0
        results = tuple(
            ToolResult(c.id, c.name, ToolResultStatus.SUCCESS, str(c.arguments.get("n", 0)))
            for c in action.tool_calls
        )
        n += sum(int(c.arguments.get("n", 0)) for c in action.tool_calls)
        hidden = CounterHidden(state.hidden.total + n)
        obs = Observation(prompt=state.observation.prompt)
        if results:
            obs = obs.with_tool_results(results, text=f"total={hidden.total}")
        next_state = State(
            obs,
            hidden,
            StateMetadata(
                state.metadata.step + 1,
                state.metadata.episode_id,
                is_terminal=hidden.total >= 10,
                info={"counter": self.counter},
            ),
        )
        self._tracker.track(next_state)
        rewards = self.compute_rewards(state, action, next_state)
        return StepResult(
            next_state,
            rewards,
            terminated=next_state.metadata.is_terminal,
            info={"counter": self.counter, "pid": __import__("os").getpid()},
        )

    def compute_rewards(self, state, action, next_state) -> SignalBundle:
        return SignalBundle.single(
            float(next_state.hidden.total - state.hidden.total),
            name="delta",
            reward_type=RewardType.STEP,
        )

    def close(self) -> None:
        self.closed = True

    def explode(self) -> None:
        raise ValueError("boom")

    def make_lock(self) -> Any:
        return __import__("threading").Lock()  # cannot be pickled


class PureEnv(CounterEnv):
    """Same dynamics, but pure: step depends only on (state, action)."""

    def __init__(self, tasks: int = 4) -> None:
        super().__init__(tasks)
        self._spec = EnvironmentSpec("pure", adapter="test", is_multi_turn=True, pure_step=True)

    def step(self, state, action):
        n = int(action.text) if action.text else 0
        hidden = CounterHidden(state.hidden.total + n)
        nxt = State(
            state.observation,
            hidden,
            StateMetadata(state.metadata.step + 1, state.metadata.episode_id),
        )
        return StepResult(nxt, SignalBundle((Signal("delta", RewardType.STEP, float(n)),)))


class NoForkSpecEnv(CounterEnv):
    """Neither pure nor replayable (no seed, no task index)."""

    def __init__(self) -> None:
        super().__init__()
        self._spec = EnvironmentSpec("nofork", supports_seed=False, supports_task_index=False)
