"""States, actions, observations, tools, the environment spec and step result, signals."""

import dataclasses
import subprocess
import sys
from dataclasses import dataclass

import pytest

from twinkle import core
from twinkle.core import (
    Action,
    Environment,
    EnvironmentSpec,
    ImageContent,
    Observation,
    ObservationContent,
    RewardFunction,
    RewardType,
    Signal,
    SignalBundle,
    State,
    StateMetadata,
    StepResult,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultStatus,
    find_ground_truth,
)
from twinkle.core.environment import _StateContinuityTracker
from twinkle.core.extraction import BoxedExtractor
from twinkle.core.reward import FormatReward, StepPenalty


def _state(step=0, episode="ep", hidden=None, info=None):
    return State(Observation("q"), hidden, StateMetadata(step, episode, info=info or {}))


def test_frozen_types():
    s = _state()
    for obj, field in (
        (s, "hidden"),
        (s.metadata, "step"),
        (s.observation, "prompt"),
        (Action.from_text("a"), "text"),
        (Signal("x", RewardType.STEP), "reward"),
        (EnvironmentSpec("e"), "name"),
        (ToolCall("1", "f"), "name"),
    ):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, None)


def test_with_metadata_copies_info():
    s = _state(info={"k": 1})
    t = s.with_metadata(step=3, is_terminal=True)
    assert (t.metadata.step, t.metadata.is_terminal, t.metadata.episode_id) == (3, True, "ep")
    assert s.metadata.step == 0 and t.observation is s.observation
    t.metadata.info["k"] = 2
    assert s.metadata.info["k"] == 1
    with pytest.raises(TypeError):
        s.with_metadata(nope=1)


def test_actions():
    call = ToolCall("c1", "search", {"q": "x"})
    assert Action.from_text("hi").is_text_only and not Action.from_text("hi").has_tool_calls
    a = Action.from_tool_call(call)
    assert a.text is None and a.has_tool_calls and not a.is_text_only and not a.has_text
    assert Action(text="").is_text_only and Action(text="").has_text
    assert not Action().is_text_only
    assert Action.from_tool_calls([call, call]).tool_calls == (call, call)
    assert Action(text="t", tool_calls=(call,)).has_tool_calls


def test_tool_types_roundtrip():
    call = ToolCall.from_openai({"id": "c", "function": {"name": "f", "arguments": '{"x": 1}'}})
    assert call == ToolCall("c", "f", {"x": 1})
    assert ToolCall.from_openai(call.to_openai()) == call
    assert ToolCall.from_openai({"function": {"name": "f", "arguments": "not json"}}).arguments == {
        "_raw": "not json"
    }
    assert ToolCall.from_openai({"function": {"name": "f", "arguments": ""}}).arguments == {}
    assert ToolDefinition("s").to_openai()["function"]["parameters"]["type"] == "object"


def test_tool_results_populate_state_data():
    obs = Observation("q", state=ObservationContent("old", data={"score": 3}))
    result = ToolResult("c1", "search", ToolResultStatus.SUCCESS, "Found 3 results...")
    new = obs.with_tool_results((result,), text="Found")
    assert new.tool_results == (result,)
    assert new.state.text == "Found" and new.state.data["score"] == 3
    assert new.state.data["tool_results"] == [
        {
            "call_id": "c1",
            "tool_name": "search",
            "status": "SUCCESS",
            "output": "Found 3 results...",
            "error": None,
        }
    ]
    assert obs.state.data == {"score": 3}  # the original is untouched


def test_tool_env_step_populates_tool_results():
    from envs_for_core_tests import CounterEnv

    env = CounterEnv()
    s, _ = env.reset()
    r = env.step(s, Action.from_tool_call(ToolCall("c1", "add", {"n": 2})))
    assert r.next_state.observation.state.data["tool_results"][0]["output"] == "2"
    assert r.next_state.hidden.total == 2 and r.rewards.total == 2.0


def test_images():
    img = ImageContent("aGk=")
    obs = Observation(
        "q",
        task=ObservationContent("t", images=(img,)),
        state=ObservationContent("s", images=(img, img)),
    )
    images = obs.get_images()
    assert [i.source for i in images.all] == ["task", "state", "state"] and images
    assert not Observation("q").get_images()
    assert not obs.strip_images().get_images()


def test_ground_truth_lookup():
    @dataclass
    class Hidden:
        answer: str | None = None
        target: str | None = "t"

    assert find_ground_truth({"answer": 4, "target": 5}) == "4"
    assert find_ground_truth({"expected_answer": None, "ground_truth": "g"}) == "g"
    assert find_ground_truth(Hidden()) == "t"
    assert find_ground_truth(Hidden(answer="a")) == "a"
    assert find_ground_truth(None) is None and find_ground_truth({}) is None


def test_step_result_and_spec():
    s = _state()
    r = StepResult(next_state=s)
    assert (r.done, r.extracted_action, r.resolved_action, r.rewards.total) == (
        False,
        None,
        None,
        0.0,
    )
    assert StepResult(s, terminated=True).done and StepResult(s, truncated=True).done
    spec = EnvironmentSpec("e")
    assert (
        spec.adapter,
        spec.max_steps,
        spec.is_multi_turn,
        spec.supports_task_index,
        spec.supports_len,
        spec.supports_seed,
        spec.pure_step,
    ) == ("", None, False, True, True, True, False)


def test_environment_protocol():
    from envs_for_core_tests import CounterEnv

    assert isinstance(CounterEnv(), Environment)
    assert not isinstance(object(), Environment)


def test_continuity_tracker():
    t = _StateContinuityTracker()
    s0 = _state()
    t.validate(_state(step=5), "env")  # no-op before the first track
    t.track(s0)
    t.validate(s0, "env")
    with pytest.raises(NotImplementedError, match="stale state"):
        t.validate(_state(step=1), "env")
    with pytest.raises(NotImplementedError, match="different episode") as info:
        t.validate(_state(episode="other"), "my-env")
    assert "pure_step=False" in str(info.value) and "my-env" in str(info.value)


def test_signal_bundle():
    b = SignalBundle(
        (
            Signal("correctness", RewardType.OUTCOME, reward=0.8, weight=2.0),
            Signal("hint", RewardType.STEP, feedback="check units"),
            Signal("format", RewardType.FORMAT, reward=1.0, weight=0.5, feedback="ok"),
        )
    )
    assert b.total == pytest.approx(2.1)
    assert b.by_name("hint").feedback == "check units" and b.by_name("nope") is None
    with pytest.raises(ValueError, match="Signal 'nope' not found"):
        b.by_name("nope", required=True)
    assert [s.name for s in b.by_type(RewardType.FORMAT)] == ["format"]
    assert b.by_type(RewardType.PROCESS) == ()
    assert [s.name for s in b.numeric_signals()] == ["correctness", "format"]
    assert b.feedback_texts() == ("check units", "ok")
    assert b.as_dict() == {"correctness": 0.8, "hint": None, "format": 1.0}
    empty = SignalBundle.empty()
    assert empty.total == 0.0 and isinstance(empty.total, float)  # a float even with no signals
    single = SignalBundle.single(1, name="r", reward_type=RewardType.STEP)
    assert single.by_name("r").reward_type is RewardType.STEP and isinstance(single.total, float)
    assert SignalBundle([Signal("a", RewardType.STEP, 1.0)]).signals[0].name == "a"
    assert len({RewardType.OUTCOME, RewardType.STEP, RewardType.FORMAT, RewardType.PROCESS}) == 4


def test_rule_rewards():
    s = _state()
    fmt = FormatReward(BoxedExtractor())
    assert isinstance(fmt, RewardFunction)
    good = fmt.compute(s, Action.from_text(r"\boxed{1}"), s)
    assert (good.name, good.reward, good.reward_type) == ("format", 1.0, RewardType.FORMAT)
    assert fmt.compute(s, Action(), s).reward == 0.0
    assert good.metadata["extraction"]["found"] is True
    pen = StepPenalty(0.25).compute(s, Action.from_text("x"), s.with_metadata(step=4))
    assert (pen.reward, pen.metadata) == (-0.25, {"step": 4})


def test_package_exports_and_light_import():
    assert core.__all__ == sorted(core.__all__)
    for name in core.__all__:
        assert getattr(core, name) is not None
    code = (
        "import sys, twinkle.core, twinkle.core.extraction, twinkle.core.cleaning, "
        "twinkle.core.trajectory, twinkle.core.branching, twinkle.core.judge, twinkle.core.reward;"
        "print([m for m in ('openai', 'mlflow', 'prefect', 'torch', 'httpx') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
