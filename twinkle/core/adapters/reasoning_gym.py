"""The ``reasoning_gym`` adapter: every procedural generator of ``reasoning-gym``.

``get_environment(name, size=, seed=, **config)`` builds ``reasoning_gym.create_dataset``
with the generator's own config; each answer is scored by the generator's verifier
(``dataset.score_answer``), so partial credit is kept (``outcome`` is ``correct`` only for a
full score). The answer is read from ``<answer>...</answer>`` as reasoning-gym's own
``extract_answer`` does (behind the special-token and think-block cleaners).

Listing reads the generator names from the package's source without importing it (importing
``reasoning_gym`` costs about a second), so ``twinkle env list`` stays fast.

Example:
    >>> from twinkle.core.registry import environment_registry
    >>> env = environment_registry.get("leg_counting", adapter="reasoning_gym", size=5, seed=42)
    >>> s, _ = env.reset(options={"task_index": 0})
    >>> answer = s.hidden.expected_answer
    >>> env.step(s, Action.from_text(f"<answer>{answer}</answer>")).rewards.total
    1.0
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twinkle.core.adapters._common import BaseAdapter, SingleTurnEnv, outcome_signal
from twinkle.core.state import Action

__all__ = ["ReasoningGymAdapter", "ReasoningGymEnvironment"]

_REGISTER = re.compile(r"register_dataset\(\s*(?:(['\"])([\w\-]+)\1|([A-Za-z_]\w*))")
_SKIP = frozenset({"factory.py", "composite.py", "version_manager.py"})


def scan_generator_names(root: Path) -> list[str]:
    """The names a reasoning-gym source tree registers, read from ``register_dataset`` calls."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        if path.name in _SKIP:
            continue
        source = path.read_text(encoding="utf-8", errors="replace")
        if "register_dataset(" not in source:
            continue
        for match in _REGISTER.finditer(source):
            if match.group(2):
                names.add(match.group(2))
                continue
            constant = re.search(
                rf"^{re.escape(match.group(3))}\s*=\s*(['\"])([\w\-]+)\1", source, re.M
            )
            if constant:
                names.add(constant.group(2))
    # composite.py registers the composite generator itself
    if (root / "composite.py").is_file():
        names.add("composite")
    return sorted(names)


class ReasoningGymEnvironment(SingleTurnEnv):
    """One reasoning-gym generator as a single-turn environment.

    Args:
        name: the generator (``leg_counting``, ``basic_arithmetic``, ...).
        size: number of tasks (default 100).
        seed: the generator seed (default 42).
        system_prompt: default reasoning-gym's ``default`` system prompt; ``None`` keeps it,
            ``""`` drops it.
        **config: the generator's config fields (``min_animals=2``...).
    """

    adapter_name = "reasoning_gym"
    default_post_cleaners: tuple[str, ...] = ()  # as reasoning-gym's extract_answer

    def __init__(
        self,
        name: str,
        *,
        size: int = 100,
        seed: int = 42,
        system_prompt: str | None = None,
        pre_cleaners: Any = None,
        post_cleaners: Any = None,
        extra_rewards: Any = (),
        **config: Any,
    ) -> None:
        rg = _import()
        self.dataset = rg.create_dataset(name, size=size, seed=seed, **config)
        self._verify = self.dataset.score_answer
        self._entries: dict[int, dict[str, Any]] = {}  # index -> entry, for score_answers
        if system_prompt is None:
            from reasoning_gym.utils import SYSTEM_PROMPTS

            system_prompt = SYSTEM_PROMPTS["default"]
        super().__init__(
            name,
            size=len(self.dataset),
            system_prompt=system_prompt or None,
            pre_cleaners=pre_cleaners,
            post_cleaners=post_cleaners,
            extra_rewards=extra_rewards,
            metadata={"seed": seed, "config": dict(config)},
        )

    def load_task(self, index: int) -> dict[str, Any]:
        entry = self.dataset[index]
        return {
            "prompt": entry["question"],
            "answer": entry.get("answer"),
            "id": f"{self.spec.name}-{index}",
            "entry": entry,
        }

    def reward_value(self, task: Mapping[str, Any], extracted: str | None) -> float:
        return 0.0 if extracted is None else float(self._verify(extracted, task["entry"]))

    def score_answers(self, indices: Sequence[int], answers: Sequence[str | None]) -> list[float]:
        """:meth:`reward_value` of each answer, with the verifier called directly: this loop
        is the whole per-answer cost of ``score_responses`` besides extraction."""
        if len(indices) != len(answers):
            raise ValueError("indices and answers must have the same length")
        entries, verify = self._entries, self._verify
        try:  # one comprehension while every entry is known and no verifier raises
            return [
                0.0 if a is None else float(verify(a, entries[i])) for i, a in zip(indices, answers)
            ]
        except Exception:  # noqa: BLE001 - a new index, or a verifier that raised: go slowly
            pass
        new = [i for i in indices if i not in entries]
        entries.update((i, task["entry"]) for i, task in self._tasks_for(new).items())
        out = []
        for i, answer in zip(indices, answers):
            try:
                out.append(0.0 if answer is None else float(verify(answer, entries[i])))
            except Exception:  # noqa: BLE001 - as in step: a crashing verifier scores 0.0
                out.append(0.0)
        return out

    def score(self, task: Mapping[str, Any], extracted: str | None, action: Action) -> tuple:
        if extracted is None:
            return (outcome_signal("correctness", "unparsed", 0.0, extracted=None),)
        reward = float(self._verify(extracted, task["entry"]))
        outcome = "correct" if reward >= 1.0 else "wrong"
        return (outcome_signal("correctness", outcome, reward, extracted=extracted),)


class ReasoningGymAdapter(BaseAdapter):
    """Adapter over the ``reasoning-gym`` package (``pip install 'twinkle[envs]'``).

    Example:
        >>> "leg_counting" in ReasoningGymAdapter().list_environments()
        True
    """

    name = "reasoning_gym"
    requires = ("reasoning_gym",)

    def __init__(self) -> None:
        self._names: list[str] | None = None

    def list_environments(self) -> list[str]:
        if self._names is None:
            spec = importlib.util.find_spec("reasoning_gym") if self.installed() else None
            if spec is None or spec.origin is None:
                return []
            self._names = scan_generator_names(Path(spec.origin).parent)
        return list(self._names)

    def get_environment(self, name: str, **config: Any) -> ReasoningGymEnvironment:
        self.ensure_installed()
        return ReasoningGymEnvironment(name, **config)

    def get_environment_info(self, name: str) -> dict[str, Any]:
        info = super().get_environment_info(name)
        info["description"] = f"reasoning-gym generator '{name}', scored by its own verifier"
        return info

    def get_default_system_prompt(self, name: str) -> str | None:
        from reasoning_gym.utils import SYSTEM_PROMPTS

        return SYSTEM_PROMPTS["default"]

    def get_native_answer_extractor(self, task: Any = None) -> Any:
        from reasoning_gym.utils import extract_answer

        from twinkle.core.extraction import NativeExtractor

        return NativeExtractor(extract_answer)


def _import() -> Any:
    from twinkle.errors import require

    return require("reasoning_gym", "the 'reasoning_gym' environment adapter", "envs")
