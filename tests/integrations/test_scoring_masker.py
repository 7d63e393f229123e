"""TrajectoryMasker with a tokenizer trained here and its ChatML template: ids and masks line up."""

import copy
import json

import pytest

from twinkle.core import (
    Action,
    Observation,
    SignalBundle,
    State,
    StateMetadata,
    ToolCall,
    ToolDefinition,
    ToolResult,
)
from twinkle.core.trajectory import Trajectory, Transition
from twinkle.integrations import TrajectoryMasker

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List the files, then answer."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "run_command", "arguments": '{"command": "ls"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
    {"role": "assistant", "content": "The answer is 18.", "finish_reason": "stop"},
]


def _template_ids(tok, messages):
    msgs = copy.deepcopy(messages)
    for m in msgs:
        m.pop("finish_reason", None)
        for c in m.get("tool_calls") or ():
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return tok.encode(tok.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)


def test_chat_mode_ids_equal_the_templated_conversation(chat_tokenizer):
    tok = chat_tokenizer
    out = TrajectoryMasker(tok, mode="chat").mask_messages(MESSAGES, rewards=[0.0, 1.0])
    assert list(out.input_ids) == _template_ids(tok, MESSAGES)
    assert len(out.response_ids) == len(out.response_mask) and out.rewards == (0.0, 1.0)
    prompt = tok.decode(out.prompt_ids)
    assert prompt.endswith("<|im_start|>assistant\n") and "List the files" in prompt
    model = [s for s in out.spans if s.source == "model"]
    env = [s for s in out.spans if s.source == "environment"]
    assert [s.step_index for s in model] == [0, 1]
    assert '"run_command"' in model[0].text and model[0].text.endswith("<|im_end|>")
    assert model[1].text == "The answer is 18.<|im_end|>"  # generated text ends at end-of-turn
    assert len(env) == 2 and "a.py b.py" in env[0].text
    assert env[0].text.startswith("\n<|im_start|>tool")  # the template's newline is not generated
    assert env[0].text.endswith("<|im_start|>assistant\n")  # the header is the environment's
    assert env[1].text == "\n"
    # the mask selects exactly the model spans' tokens
    picked = [i for i, m in zip(out.response_ids, out.response_mask) if m]
    assert picked == [t for s in model for t in s.token_ids]
    assert out.num_model_tokens == sum(len(s.token_ids) for s in model)


def test_trailing_environment_turn_and_missing_rewards(chat_tokenizer):
    msgs = MESSAGES[:4]
    out = TrajectoryMasker(chat_tokenizer, mode="chat").mask_messages(msgs)
    assert out.rewards == (0.0,)
    assert out.spans[-1].source == "environment" and "a.py" in out.spans[-1].text
    assert list(out.input_ids) == _template_ids(chat_tokenizer, msgs)
    assert out.response_mask[-1] == 0


def test_plain_mode_concatenates_text(chat_tokenizer):
    out = TrajectoryMasker(chat_tokenizer).mask_messages(MESSAGES, rewards=[0.5])
    assert out.rewards == (0.5, 0.0)
    assert [s.source for s in out.spans] == ["model", "environment", "model"]
    assert chat_tokenizer.decode(out.prompt_ids) == "You are terse.List the files, then answer."


def _tool_trajectory():
    tools = (ToolDefinition("run_command", "Run a shell command."),)
    s0 = State(
        Observation(
            "List the files.",
            messages=({"role": "user", "content": "List the files."},),
            available_tools=tools,
        ),
        None,
        StateMetadata(0, "ep"),
    )
    call = ToolCall("c1", "run_command", {"command": "ls"})
    s1 = State(
        s0.observation.with_tool_results((ToolResult("c1", "run_command", output="a.py"),)),
        None,
        StateMetadata(1, "ep"),
    )
    s2 = s1.with_metadata(step=2, is_terminal=True)
    traj = Trajectory.create(s0)
    traj.add_transition(
        Transition(
            s0, Action(text="Let me look.", tool_calls=(call,)), s1, SignalBundle.single(0.0)
        )
    )
    traj.add_transition(Transition(s1, Action.from_text("a.py"), s2, SignalBundle.single(1.0)))
    return traj


def test_core_trajectory_plain_and_chat(chat_tokenizer):
    traj = _tool_trajectory()
    plain = TrajectoryMasker(chat_tokenizer).mask_trajectory(traj)
    assert plain.rewards == (0.0, 1.0)
    assert [(s.source, s.step_index) for s in plain.spans] == [
        ("model", 0),
        ("model", 0),
        ("environment", 0),
        ("model", 1),
    ]
    assert json.loads(plain.spans[1].text) == {
        "id": "c1",
        "name": "run_command",
        "arguments": {"command": "ls"},
    }
    assert plain.spans[2].text == "a.py"
    chat = TrajectoryMasker(chat_tokenizer, mode="chat").mask_trajectory(traj)
    assert chat.rewards == (0.0, 1.0)
    assert [s.source for s in chat.spans] == ["model", "environment", "model", "environment"]
    assert "a.py" in chat.spans[1].text
    empty = Trajectory.create(traj.initial_state)
    assert TrajectoryMasker(chat_tokenizer).mask_trajectory(empty).response_ids == ()


def test_mask_batch_accepts_rows_and_trajectories(chat_tokenizer):
    masker = TrajectoryMasker(chat_tokenizer, mode="chat")
    rows = [
        {"messages": MESSAGES, "rewards": [0.0, 1.0]},
        _tool_trajectory(),
        {"messages": MESSAGES[:2]},
    ]
    out = masker.mask_batch(rows)
    assert out[0].rewards == (0.0, 1.0) and out[1].rewards == (0.0, 1.0)
    assert out[2].response_ids == () and out[2].prompt_ids


def test_template_that_is_not_prefix_stable_is_refused(chat_tokenizer):
    tok = copy.deepcopy(chat_tokenizer)
    tok.chat_template = "{{ messages | length }}:" + tok.chat_template  # the header changes
    with pytest.raises(ValueError, match="prefix-stable"):
        TrajectoryMasker(tok, mode="chat").mask_messages(MESSAGES)
    with pytest.raises(ValueError):
        TrajectoryMasker(tok, mode="fancy")
    with pytest.raises(TypeError):
        TrajectoryMasker(object(), mode="chat")
