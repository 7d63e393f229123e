"""The built-in task environments: answers, outcomes, and a code sandbox that cannot be gamed."""

import json

import pytest

from twinkle.core import Action, ToolCall
from twinkle.core.environments import (
    CodeEnvironment,
    MathEnvironment,
    MultipleChoiceEnvironment,
    SubprocessRunner,
    TestCase,
    load_tasks,
    parse_number,
)
from twinkle.core.environments.base import default_tasks_dir


def _step(env, index, text):
    state, _ = env.reset(options={"task_index": index})
    return env.step(state, Action.from_text(text))


def _outcome(result, name="correctness"):
    return result.rewards.by_name(name).metadata["outcome"]


def test_bundled_task_files_load_with_expected_sizes():
    d = default_tasks_dir()
    assert len(load_tasks(d / "math.jsonl")) == 30
    assert len(load_tasks(d / "multiple_choice.jsonl")) == 20
    code = load_tasks(d / "code.jsonl")
    assert len(code) == 10 and all(t["tests"] for t in code)


@pytest.mark.parametrize(
    "text,value",
    [
        ("2025", "2025"),
        ("1,234", "1234"),
        ("-7", "-7"),
        ("12.4", "62/5"),
        ("3/4", "3/4"),
        ("\\frac{5}{8}", "5/8"),
        ("\\frac58", "5/8"),
        ("-\\dfrac{1}{2}", "-1/2"),
        ("$12.50", "25/2"),
        ("96%", "96"),
        ("42 apples", "42"),
        ("1e5", "100000"),
    ],
)
def test_parse_number_reads_common_answer_forms(text, value):
    assert str(parse_number(text)) == value


@pytest.mark.parametrize("text", ["", "abc", "3/0", "\\frac{a}{b}", None])
def test_parse_number_rejects_non_numbers(text):
    assert parse_number(text) is None


def test_math_environment_scores_and_tells_unparsed_from_wrong():
    env = MathEnvironment()
    assert env.spec.pure_step and not env.spec.is_multi_turn and len(env) == 30
    state, info = env.reset(options={"task_index": 0})
    assert info == {"task_index": 0, "task_id": "math-001"}
    assert "\\boxed" in state.observation.prompt and state.hidden.expected_answer == "18"
    for text in [
        "\\boxed{18}",
        "#### 18",
        "<answer>18</answer>",
        "so 18 muffins are left.",
        "x = 18",
    ]:
        r = _step(env, 0, text)
        assert (r.rewards.total, _outcome(r), r.extracted_action) == (
            1.0,
            "correct",
            r.info["extracted_answer"],
        )
    wrong = _step(env, 0, "The answer is 19")
    assert (wrong.rewards.total, _outcome(wrong)) == (0.0, "wrong")
    for text in ["I do not know", "", "<think>18</think>no idea"]:
        r = _step(env, 0, text)
        assert (r.rewards.total, _outcome(r), r.extracted_action) == (0.0, "unparsed", None)
        assert r.rewards.by_name("format").reward == 0.0
    # fractions and decimals compare exactly: 5/8 == 0.625 == \frac{5}{8}
    for text in ["\\boxed{0.625}", "\\boxed{\\frac{5}{8}}", "The answer is 5/8."]:
        assert _step(env, 7, text).rewards.total == 1.0


def test_math_episode_ends_after_one_step_and_state_is_reusable():
    env = MathEnvironment(limit=2)
    state, _ = env.reset(options={"task_index": 1})
    first = env.step(state, Action.from_text("\\boxed{378}"))
    assert first.terminated and first.done and first.next_state.metadata.is_terminal
    assert env.step(state, Action.from_text("\\boxed{1}")).rewards.total == 0.0  # pure step
    with pytest.raises(ValueError, match="ended"):
        env.step(first.next_state, Action.from_text("again"))
    with pytest.raises(IndexError):
        env.reset(options={"task_index": 2})
    seeded = [env.reset(seed=3)[1]["task_index"] for _ in range(3)]
    assert len(set(seeded)) == 1


def test_math_rejects_tasks_without_numeric_answers():
    with pytest.raises(ValueError, match="not a number"):
        MathEnvironment(tasks=[{"id": "x", "question": "?", "answer": "blue"}])
    with pytest.raises(FileNotFoundError):
        MathEnvironment(path="/nonexistent/tasks.jsonl")


def test_multiple_choice_letters_are_limited_to_the_task():
    env = MultipleChoiceEnvironment()
    assert _step(env, 0, "The answer is B").rewards.total == 1.0
    assert _step(env, 0, "Answer: (B)").rewards.total == 1.0
    assert _outcome(_step(env, 0, "A. Venus\nAnswer: C")) == "wrong"
    assert _outcome(_step(env, 0, "Answer: E")) == "unparsed"  # four options only
    assert _outcome(_step(env, 0, "Because it is hot")) == "unparsed"
    with pytest.raises(ValueError, match="not a choice"):
        MultipleChoiceEnvironment(tasks=[{"question": "?", "choices": ["a", "b"], "answer": "C"}])


def test_compute_rewards_probes_without_stepping_and_extra_rewards_join():
    class Length:
        name, reward_type = "length", None

        def compute(self, state, action, next_state):
            from twinkle.core import RewardType, Signal

            return Signal("length", RewardType.PROCESS, reward=len(action.text) / 100, weight=0.5)

    class Broken:
        name = "broken"
        from twinkle.core import RewardType

        reward_type = RewardType.PROCESS

        def compute(self, state, action, next_state):
            raise RuntimeError("boom")

    env = MathEnvironment(limit=1, extra_rewards=[Length(), Broken()])
    state, _ = env.reset(options={"task_index": 0})
    bundle = env.compute_rewards(state, Action.from_text("\\boxed{18}"), state)
    assert bundle.by_name("correctness").reward == 1.0
    assert bundle.by_name("length").reward == pytest.approx(0.1)
    assert bundle.by_name("broken").metadata["outcome"] == "error"
    assert bundle.total == pytest.approx(1.0 + 0.05)
    assert len(env.reward_functions) == 3


@pytest.fixture(scope="module")
def code_env():
    return CodeEnvironment(timeout=4)


def test_every_reference_solution_passes_its_tests(code_env):
    for i, task in enumerate(code_env.tasks):
        r = _step(code_env, i, "```python\n" + task["reference_solution"] + "```")
        assert r.rewards.total == 1.0, (task["id"], r.rewards.signals[0].metadata)
        assert _outcome(r, "tests") == "correct"


def test_code_wrong_partial_and_unparsed_are_distinguished(code_env):
    wrong = _step(code_env, 0, "```python\ndef add_numbers(a, b):\n    return a - b\n```")
    assert (wrong.rewards.total, _outcome(wrong, "tests")) == (0.0, "wrong")
    partial = _step(code_env, 8, "```python\ndef gcd(a, b):\n    return 1\n```")  # gcd(7, 13) == 1
    assert 0.0 < partial.rewards.total < 1.0 and _outcome(partial, "tests") == "wrong"
    none = _step(code_env, 0, "I would add the numbers.")
    assert (none.rewards.total, _outcome(none, "tests"), none.extracted_action) == (
        0.0,
        "unparsed",
        None,
    )


GOOD = "def add_numbers(a, b):\n    return a + b\n"
CHEATS = {
    "exit_zero": "import sys\nprint('ALL TESTS PASSED')\nsys.exit(0)\n",
    "hard_exit": "import os\nos._exit(0)\n",
    "always_equal": (
        "class E:\n    def __eq__(self, o): return True\n\ndef add_numbers(a, b):\n    return E()\n"
    ),
    "int_subclass": (
        "class I(int):\n    def __eq__(self, o): return True\n\n"
        "def add_numbers(a, b):\n    return I(42)\n"
    ),
    "fake_marker": (
        "print('TWINKLE-RESULT-' + '0' * 32 + '[{\"value\": [\"int\", \"5\"]}]')\n"
        "def add_numbers(a, b):\n    return 42\n"
    ),
    "rewrite_grader": (
        "import os, json\n"
        "here = os.path.dirname(os.path.abspath(__file__))\n"
        "json.dump({'module': 'solution', 'calls': [], 'mark': 'x'},"
        " open(os.path.join(here, '.twinkle_grader', 'tests.json'), 'w'))\n"
        "def add_numbers(a, b):\n    return 42\n"
    ),
    "infinite_loop": "while True:\n    pass\n",
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_cheating_solutions_score_nothing(code_env, cheat):
    r = _step(code_env, 0, "```python\n" + CHEATS[cheat] + "```")
    assert r.rewards.total == 0.0, r.rewards.signals[0].metadata


def test_policy_that_overwrites_the_tests_cannot_score_itself(code_env):
    # An agentic rollout: the policy writes a wrong solution, then "tests" that always pass,
    # a fake grader, and a reward file; the pristine tests are copied in after all of it.
    writes = {
        "solution.py": "def add_numbers(a, b):\n    return 42\n",
        "test_solution.py": "def test_ok():\n    assert True\n",
        ".twinkle_grader/tests.json": json.dumps({"module": "solution", "calls": [], "mark": "x"}),
        ".twinkle_grader/grade.py": "print('TWINKLE-RESULT-anything[]')\n",
        "reward.txt": "1.0",
    }
    calls = tuple(
        ToolCall(f"c{i}", "write_file", {"path": p, "content": c})
        for i, (p, c) in enumerate(writes.items())
    )
    state, _ = code_env.reset(options={"task_index": 0})
    cheat = code_env.step(state, Action(text="All tests pass!", tool_calls=calls))
    assert cheat.rewards.total == 0.0 and _outcome(cheat, "tests") == "wrong"
    # The same workspace with a correct solution does score: the tampering was what failed.
    fixed = dict(writes, **{"solution.py": GOOD})
    calls = tuple(
        ToolCall(f"c{i}", "write_file", {"path": p, "content": c})
        for i, (p, c) in enumerate(fixed.items())
    )
    assert code_env.step(state, Action(text="done", tool_calls=calls)).rewards.total == 1.0


def test_subprocess_runner_limits_memory_and_escaping_paths():
    runner = SubprocessRunner(timeout=10, memory_mb=256)
    out = runner.run({"solution.py": "x = bytearray(1 << 30)\n"}, [TestCase("len(x)", "1")])
    assert out.passed == 0 and "MemoryError" in out.failures[0]
    out = runner.run(
        {"../../escape.py": "x", "solution.py": "def f():\n    return 1\n"}, [TestCase("f()", "1")]
    )
    assert out.all_passed


def test_sandbox_failure_is_an_error_outcome_not_a_wrong_answer():
    class DownRunner:
        name = "down"

        def run(self, files, tests, module="solution"):
            from twinkle.core.environments import RunOutcome

            return RunOutcome(0, len(tests), "error", ("sandbox failure: connection refused",))

    env = CodeEnvironment(runner=DownRunner(), limit=1)
    r = _step(env, 0, "```python\n" + GOOD + "```")
    meta = r.rewards.by_name("tests").metadata
    assert (r.rewards.total, meta["outcome"]) == (0.0, "error") and "connection refused" in meta[
        "error"
    ]


def test_absolute_sandbox_paths_map_into_the_workspace(code_env):
    state, _ = code_env.reset(options={"task_index": 0})
    write = ToolCall("c1", "write_file", {"path": "/home/user/solution.py", "content": GOOD})
    assert code_env.step(state, Action(text="done", tool_calls=(write,))).rewards.total == 1.0
    submit = ToolCall("c2", "submit_solution", {"code": GOOD})
    assert code_env.step(state, Action(text=None, tool_calls=(submit,))).rewards.total == 1.0


def test_files_blocking_the_grader_paths_do_not_break_grading():
    runner = SubprocessRunner(timeout=10)
    files = {
        ".twinkle_grader": "a file where the grader directory goes",
        "solution.py": GOOD,
        "x": "file",
        "x/y.py": "cannot be written under a file",
    }
    out = runner.run(files, [TestCase("add_numbers(2, 3)", "5")])
    assert out.status == "ok" and out.all_passed
