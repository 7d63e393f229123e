"""The ``dialogue`` adapter: a multi-turn conversation with a simulated user.

The user is played by any OpenAI-compatible endpoint (``user_base_url``/``user_model``, or a
``user_backend`` with ``generate_chat``), prompted with the scenario's persona and goal.
The policy speaks; the simulated user answers. The episode ends when the user says the goal
is reached (it ends its turn with ``[GOAL]``), or at the turn budget (truncated). The
finished conversation is then scored by a judge rubric (a
:class:`~twinkle.core.judge.JudgeReward`, ``judge_base_url``/``judge_model`` or ``judge``);
without a judge, ``goal_reached`` (1.0 or 0.0) is the reward. Non-extracting: both
``extracted_action`` and ``resolved_action`` are None.

Presets (environment names) give a scenario list; ``scenarios=[{"opening", "persona",
"goal"}, ...]`` replaces it, and ``task_index`` picks one.

Example:
    >>> DialogueAdapter().list_environments()
    ['custom', 'customer_support', 'tutoring']
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twinkle.core.adapters._common import BaseAdapter, EpisodeMembers
from twinkle.core.environment import EnvironmentSpec, StepResult
from twinkle.core.judge import JudgePromptTemplate
from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import Action, Observation, ObservationContent, State, StateMetadata

__all__ = ["DIALOGUE_RUBRIC", "PRESETS", "DialogueAdapter", "DialogueEnvironment"]

GOAL_TOKEN = "[GOAL]"

PRESETS: dict[str, list[dict[str, str]]] = {
    "customer_support": [
        {
            "opening": "Hi, I was charged twice for my last order. Can you help?",
            "persona": "A polite customer whose card was charged twice for order #1042.",
            "goal": "The assistant explains that the duplicate charge will be refunded and "
            "says when.",
        },
        {
            "opening": "My package says delivered but I never got it.",
            "persona": "A worried customer; the tracking says delivered yesterday.",
            "goal": "The assistant offers a concrete next step (a trace or a replacement).",
        },
    ],
    "tutoring": [
        {
            "opening": "I don't get why 1/2 + 1/3 isn't 2/5.",
            "persona": "A 12-year-old student learning fractions.",
            "goal": "The student understands common denominators and finds 5/6.",
        },
    ],
}

USER_SYSTEM = (
    "You play a user talking to an AI assistant. Persona: {persona}\nYour goal: {goal}\n"
    "Reply with the user's next message only, in one to three sentences. When the goal has "
    "been reached, end your message with " + GOAL_TOKEN + "."
)

DIALOGUE_RUBRIC = JudgePromptTemplate(
    name="dialogue",
    system_prompt="You grade an assistant's side of a conversation against the user's goal.",
    template=(
        "User goal:\n{ground_truth}\n\nOpening request:\n{question}\n\nConversation:\n"
        "{response}\n\nRate the assistant: did it reach the goal, correctly, politely and "
        "without needless turns? 1 means it failed, 10 means it fully reached the goal. "
        "End with a line 'Score: N/10'."
    ),
)


@dataclass(frozen=True)
class DialogueHidden:
    scenario: Mapping[str, str]
    goal_reached: bool = False

    @property
    def expected_answer(self) -> str:
        return self.scenario["goal"]


class DialogueEnvironment(EpisodeMembers):
    """A conversation with a simulated user, judged at the end.

    Args:
        name: a preset name (or any name with ``scenarios``).
        scenarios: ``[{"opening", "persona", "goal"}]`` (default: the preset's).
        user_base_url, user_model, user_api_key: the simulated user's endpoint.
        user_backend: instead, any object with ``generate_chat(messages)``.
        max_turns: the policy's turn budget.
        judge: a reward function scored at the end (a JudgeReward); or ``judge_base_url``
            and ``judge_model`` to build one with :data:`DIALOGUE_RUBRIC`.
        system_prompt: the policy's system message.
    """

    def __init__(
        self,
        name: str,
        *,
        scenarios: Sequence[Mapping[str, str]] | None = None,
        user_base_url: str | None = None,
        user_model: str = "user-sim",
        user_api_key: str = "EMPTY",
        user_backend: Any = None,
        max_turns: int = 6,
        judge: Any = None,
        judge_base_url: str | None = None,
        judge_model: str = "judge",
        system_prompt: str | None = "You are a helpful assistant.",
    ) -> None:
        from twinkle.core.backend import APIBackend, ChatMessage

        self._chat = ChatMessage
        self._scenarios = [dict(s) for s in (scenarios or PRESETS.get(name, []))]
        if not self._scenarios:
            raise ValueError(f"dialogue {name!r}: give scenarios= (no preset of that name)")
        for s in self._scenarios:
            missing = {"opening", "persona", "goal"} - set(s)
            if missing:
                raise ValueError(f"dialogue scenario lacks {sorted(missing)}: {s}")
        if user_backend is None:
            if user_base_url is None:
                raise ValueError("dialogue needs user_base_url= (or user_backend=) for the user")
            user_backend = APIBackend.openai(user_model, user_base_url, user_api_key)
        self.user = user_backend
        if judge is None and judge_base_url is not None:
            from twinkle.core.judge import JudgeReward

            judge = JudgeReward.from_endpoint(judge_base_url, judge_model, DIALOGUE_RUBRIC)
        self.judge = judge
        self._system_prompt = system_prompt
        self._spec = EnvironmentSpec(
            name=name,
            adapter="dialogue",
            max_steps=max_turns,
            observation_type="text",
            action_type="text",
            is_multi_turn=True,
            pure_step=True,  # the whole conversation lives in the state
            metadata={"num_tasks": len(self._scenarios)},
        )

    @property
    def reward_functions(self) -> tuple:
        return (self.judge,) if self.judge is not None else ()

    @property
    def prompts(self) -> dict[str, str]:
        return {"user_system": USER_SYSTEM}

    def __len__(self) -> int:
        return len(self._scenarios)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[DialogueHidden], dict[str, Any]]:
        index = (options or {}).get("task_index")
        if index is None:
            index = random.Random(seed).randrange(len(self._scenarios))
        scenario = self._scenarios[index]
        messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": scenario["opening"]},)
        if self._system_prompt:
            messages = ({"role": "system", "content": self._system_prompt}, *messages)
        observation = Observation(
            scenario["opening"],
            messages,
            task=ObservationContent(text=scenario["opening"]),
            state=ObservationContent(text=scenario["opening"]),
        )
        state = State(observation, DialogueHidden(scenario), StateMetadata(0, uuid.uuid4().hex))
        return state, {"task_index": index}

    def _user_reply(self, scenario: Mapping[str, str], messages: Sequence[Mapping]) -> str:
        # the simulated user sees the conversation from its side: roles swapped
        chat = [self._chat("system", USER_SYSTEM.format(**scenario))]
        for m in messages:
            if m["role"] == "user":
                chat.append(self._chat("assistant", str(m["content"])))
            elif m["role"] == "assistant":
                chat.append(self._chat("user", str(m["content"])))
        return self.user.generate_chat(chat).text.strip()

    def step(self, state: State[DialogueHidden], action: Action) -> StepResult[DialogueHidden]:
        if state.metadata.is_terminal:
            raise ValueError(f"{self._spec.name}: the conversation has ended; call reset()")
        scenario = state.hidden.scenario
        messages = [
            *state.observation.messages,
            {"role": "assistant", "content": action.text or ""},
        ]
        step = state.metadata.step + 1
        reply = self._user_reply(scenario, messages)
        reached = GOAL_TOKEN in reply
        reply = reply.replace(GOAL_TOKEN, "").strip()
        messages.append({"role": "user", "content": reply})
        truncated = not reached and step >= (self._spec.max_steps or step + 1)
        done = reached or truncated
        observation = Observation(
            reply,
            tuple(messages),
            task=state.observation.task,
            state=ObservationContent(text=reply, data={"turn": step, "goal_reached": reached}),
        )
        next_state = State(
            observation,
            DialogueHidden(scenario, reached),
            StateMetadata(step, state.metadata.episode_id, done, {"goal_reached": reached}),
        )
        signals: list[Signal] = []
        if done:
            weight = 0.0 if self.judge is not None else 1.0  # a logged metric beside a judge
            signals.append(
                Signal("goal_reached", RewardType.OUTCOME, float(reached), weight=weight)
            )
            if self.judge is not None:
                signals.append(self._judge(state, next_state))
        return StepResult(
            next_state=next_state,
            rewards=SignalBundle(tuple(signals)),
            terminated=reached,
            truncated=truncated,
            info={"goal_reached": reached, "user_reply": reply},
        )

    def transcript(self, state: State[DialogueHidden]) -> str:
        return "\n".join(
            f"{m['role'].upper()}: {m['content']}"
            for m in state.observation.messages
            if m["role"] in {"user", "assistant"}
        )

    def _judge(self, state: State[DialogueHidden], next_state: State[DialogueHidden]) -> Signal:
        scenario = state.hidden.scenario
        if hasattr(self.judge, "score"):
            return self.judge.score(
                scenario["opening"], self.transcript(next_state), scenario["goal"]
            )
        return self.judge.compute(state, Action.from_text(self.transcript(next_state)), next_state)

    def compute_rewards(
        self, state: State[DialogueHidden], action: Action, next_state: State[DialogueHidden]
    ) -> SignalBundle:
        if not next_state.metadata.is_terminal:
            return SignalBundle()
        signals = [
            Signal("goal_reached", RewardType.OUTCOME, float(next_state.hidden.goal_reached))
        ]
        if self.judge is not None:
            signals.append(self._judge(state, next_state))
        return SignalBundle(tuple(signals))


class DialogueAdapter(BaseAdapter):
    """Dialogue presets; needs no extra package, only an OpenAI-compatible endpoint."""

    name = "dialogue"
    requires = ()
    extra = None

    def list_environments(self) -> list[str]:
        return sorted([*PRESETS, "custom"])  # custom: scenarios= gives the conversations

    def get_environment(self, name: str, **config: Any) -> DialogueEnvironment:
        return DialogueEnvironment(name, **config)

    def get_environment_info(self, name: str) -> dict[str, Any]:
        info = super().get_environment_info(name)
        count = len(PRESETS.get(name, ()))
        info["description"] = f"{count or 'your'} scenario(s) with a simulated user"
        return info
