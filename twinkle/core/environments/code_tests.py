"""Programming tasks scored by running the task's tests against the model's code in a sandbox.

The model's files come from its final answer (the last ```python block becomes
``solution.py``) and, for agentic rollouts, from its ``write_file`` tool calls, replayed in
order into a fresh workspace. The pristine tests are copied in after all of them (see
:mod:`twinkle.core.environments.runner`), so writing tests or a reward file scores nothing.

Sandbox: :class:`~twinkle.core.environments.runner.AgentEnvRunner` (``AgentEnv`` against
an E2B-compatible server) when ``sandbox_url`` is given, otherwise a resource-limited
subprocess (:class:`~twinkle.core.environments.runner.SubprocessRunner`).

Example:
    >>> env = CodeEnvironment()                      # examples/tasks/code.jsonl
    >>> s, _ = env.reset(options={"task_index": 0})  # add_numbers
    >>> code = "```python\\ndef add_numbers(a, b):\\n    return a + b\\n```"
    >>> env.step(s, Action.from_text(code)).rewards.total
    1.0
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from twinkle.core.environments.base import TaskEnvironment, TaskHidden, outcome_signal
from twinkle.core.environments.runner import (
    AgentEnvRunner,
    RunOutcome,
    SandboxRunner,
    SubprocessRunner,
    TestCase,
)
from twinkle.core.extraction import CodeBlockExtractor
from twinkle.core.signals import RewardType, Signal
from twinkle.core.state import Action
from twinkle.core.tools import ToolCall
from twinkle.data_format import normalize_tool_calls

__all__ = ["CodeEnvironment", "files_from_action"]

PROMPT = (
    "{prompt}\n\nReply with the complete solution in a single ```python code block that "
    "defines `{entry_point}`. It is saved as {module}.py and tested by calling it."
)
#: Tool names whose ``path``/``content`` arguments write a workspace file.
WRITE_TOOLS = ("write_file", "create_file")
#: Tool names whose ``code`` argument is a submitted solution.
SUBMIT_TOOLS = ("submit_solution", "submit")
#: Sandbox working directories; a write under one lands at the same relative path.
WORKSPACE_ROOTS = ("/home/user/", "/workspace/", "/tmp/twinkle-task/", "~/")
_PYTHON_BLOCK = CodeBlockExtractor(language="python")
_ANY_BLOCK = CodeBlockExtractor()


def _workspace_path(path: str) -> str:
    for root in WORKSPACE_ROOTS:
        if path.startswith(root):
            return path[len(root) :]
    return path.rsplit("/", 1)[-1] if path.startswith("/") else path.removeprefix("./")


def files_from_action(
    action: Action, module: str = "solution"
) -> tuple[dict[str, str], str | None]:
    """The workspace files an action produces, and the solution code (None if there is none).

    Tool-call writes are applied in order; a ```python block in the text (the final answer)
    wins over them for ``<module>.py``. Absolute paths are taken relative to the sandbox
    working directory they name (:data:`WORKSPACE_ROOTS`), other absolute paths by file name.
    """
    files: dict[str, str] = {}
    for call in action.tool_calls:
        args = call.arguments if isinstance(call.arguments, Mapping) else {}
        if call.name in WRITE_TOOLS and isinstance(args.get("path"), str):
            files[_workspace_path(args["path"])] = str(args.get("content", ""))
        elif call.name in SUBMIT_TOOLS and isinstance(args.get("code"), str):
            files[f"{module}.py"] = args["code"]
    code = None
    text = action.text or ""
    if "```" in text:
        code, _ = _PYTHON_BLOCK.extract(text)
        if code is None:
            code, _ = _ANY_BLOCK.extract(text)
    if code:
        files[f"{module}.py"] = code
    return files, files.get(f"{module}.py")


class CodeEnvironment(TaskEnvironment):
    """Write-a-function tasks graded by hidden tests (bundled: ``examples/tasks/code.jsonl``).

    Task dicts: ``{"id", "prompt", "entry_point", "tests": [{"call", "expected"}, ...]}``.
    Signals: ``tests`` (the pass rate; outcome ``correct`` only when all pass) and
    ``format`` (weight 0).

    Args:
        sandbox_url: an E2B-compatible server; grading then runs in a sandbox through
            ``AgentEnv``. None grades in a local resource-limited subprocess.
        sandbox_api_key: that server's API key.
        runner: a ready :class:`SandboxRunner`, overriding ``sandbox_url``.
        timeout: seconds the tests may run per answer.
        module: the file name (without ``.py``) the solution is saved as.

    Example:
        >>> env = CodeEnvironment(timeout=5)
        >>> env.runner.name
        'subprocess'
    """

    default_file = "code.jsonl"
    default_name = "code"
    blocking_score = True

    def __init__(
        self,
        *args: Any,
        sandbox_url: str | None = None,
        sandbox_api_key: str | None = None,
        runner: SandboxRunner | None = None,
        timeout: float = 10.0,
        module: str = "solution",
        **kwargs: Any,
    ) -> None:
        if runner is None:
            runner = (
                AgentEnvRunner(api_url=sandbox_url, api_key=sandbox_api_key, timeout=timeout)
                if sandbox_url
                else SubprocessRunner(timeout=timeout)
            )
        self.runner = runner
        self.module = module
        super().__init__(*args, **kwargs)

    def format_prompt(self, task: Mapping[str, Any]) -> str:
        return PROMPT.format(
            prompt=task["prompt"], entry_point=task["entry_point"], module=self.module
        )

    def expected_answer(self, task: Mapping[str, Any]) -> str | None:
        tests = task.get("tests")
        if not isinstance(tests, list) or not tests:
            raise ValueError(f"code task {task.get('id')!r} has no tests")
        for case in tests:
            TestCase.from_dict(case)  # fail at load time, not at scoring time
        # The tests are the ground truth; a judge or a dataset sees them as JSON.
        return json.dumps(tests)

    def action_from_messages(self, messages: Sequence[Mapping[str, Any]]) -> Action:
        """The final assistant text plus every file-writing tool call of the conversation."""
        final = super().action_from_messages(messages)
        calls = []
        for message in messages:
            if not isinstance(message, Mapping) or message.get("role") != "assistant":
                continue
            for raw in normalize_tool_calls(message) or ():
                call = ToolCall.from_openai(raw)
                if call.name in WRITE_TOOLS or call.name in SUBMIT_TOOLS:
                    calls.append(call)
        return Action(text=final.text, tool_calls=tuple(calls))

    def extract(self, action: Action, hidden: TaskHidden) -> tuple[str | None, dict[str, Any]]:
        files, code = files_from_action(action, self.module)
        return code, {"files": files}

    def score(
        self, hidden: TaskHidden, extracted: str | None, meta: dict[str, Any]
    ) -> tuple[Signal, ...]:
        tests = [TestCase.from_dict(t) for t in hidden.task["tests"]]
        if extracted is None:
            return self._signals("unparsed", 0.0, None, len(tests), None)
        outcome = self.runner.run(
            meta.get("files") or {f"{self.module}.py": extracted}, tests, self.module
        )
        return self._signals(None, 0.0, extracted, len(tests), outcome)

    def grade_workspace(self, task_index: int, env: Any) -> tuple[Signal, ...]:
        """Grade the workspace an ``AgentEnv`` rollout left behind (after its last action).

        Needs an :class:`AgentEnvRunner`; the pristine tests overwrite whatever the policy
        wrote at their paths before they run.
        """
        hidden = self._hidden[task_index]
        tests = [TestCase.from_dict(t) for t in hidden.task["tests"]]
        runner = self.runner if isinstance(self.runner, AgentEnvRunner) else AgentEnvRunner()
        return self._signals(
            None, 0.0, "<workspace>", len(tests), runner.run_in(env, tests, self.module)
        )

    def _signals(
        self,
        outcome: str | None,
        reward: float,
        extracted: str | None,
        total: int,
        run: RunOutcome | None,
    ) -> tuple[Signal, ...]:
        meta: dict[str, Any] = {"total": total, "passed": 0}
        if run is not None:
            meta.update(
                passed=run.passed,
                status=run.status,
                backend=run.backend,
                failures=list(run.failures[:10]),
                seconds=round(run.seconds, 3),
            )
            if run.status == "error" and any(f.startswith("sandbox failure") for f in run.failures):
                outcome, reward = "error", 0.0
                meta["error"] = run.failures[0]
            else:
                reward = run.passed / run.total if run.total else 0.0
                outcome = "correct" if run.all_passed else "wrong"
        return (
            outcome_signal("tests", outcome or "unparsed", reward, extracted=extracted, **meta),
            outcome_signal(
                "format",
                "unparsed" if extracted is None else "correct",
                0.0 if extracted is None else 1.0,
                extracted=extracted,
                reward_type=RewardType.FORMAT,
                weight=0.0,
            ),
        )
