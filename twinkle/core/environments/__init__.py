"""The built-in task environments: math word problems, multiple choice and code with tests.

Each is a single-turn :class:`~twinkle.core.environment.Environment` over a JSONL task set
shipped in ``examples/tasks/``, registered under the ``tasks`` adapter of
:data:`twinkle.core.registry.environment_registry`.

Example:
    >>> from twinkle.core.environments import MathEnvironment
    >>> from twinkle.core import Action
    >>> env = MathEnvironment()
    >>> state, info = env.reset(options={"task_index": 0})
    >>> env.step(state, Action.from_text("\\\\boxed{18}")).rewards.total
    1.0
"""

from twinkle.core.environments.adapter import TaskAdapter
from twinkle.core.environments.base import OUTCOMES, TaskEnvironment, TaskHidden, load_tasks
from twinkle.core.environments.code_tests import CodeEnvironment
from twinkle.core.environments.math_word import MathEnvironment, parse_number
from twinkle.core.environments.multiple_choice import MultipleChoiceEnvironment
from twinkle.core.environments.runner import (
    AgentEnvRunner,
    RunOutcome,
    SandboxRunner,
    SubprocessRunner,
    TestCase,
)

__all__ = [
    "OUTCOMES",
    "AgentEnvRunner",
    "CodeEnvironment",
    "MathEnvironment",
    "MultipleChoiceEnvironment",
    "RunOutcome",
    "SandboxRunner",
    "SubprocessRunner",
    "TaskAdapter",
    "TaskEnvironment",
    "TaskHidden",
    "TestCase",
    "load_tasks",
    "parse_number",
]
