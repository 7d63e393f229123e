"""MultiTurnRollout control flow with the deterministic sampler and a locally trained tokenizer."""

import json
import os

import pytest

from twinkle.data_format import SampledSequence, SampleResponse, SamplingParams
from twinkle.envs import EnvTool
from twinkle.envs.base import Env, StepResult
from twinkle.rollout import MultiTurnRollout
from twinkle.rollout.bridge import bridge_ids, extend_with_bridge
from twinkle.sampler import ScriptedSampler
from twinkle.sampler.scripted import token_logprob
from twinkle.tools import Tool, ToolManager

SYSTEM = {"role": "system", "content": "be brief"}


class Echo(Tool):
    def __call__(self, tool_name, arguments):
        return f"echo {arguments.get('text', '')}"

    def tool_info(self):
        return {
            "type": "function",
            "function": {
                "name": "echo",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
            },
        }


def call_text(name="echo", text="a"):
    # Exactly how the chat template renders a call, so the whole sequence can be compared
    # with one rendering of the final conversation.
    return (
        f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps({"text": text})}}}\n'
        "</tool_call>"
    )


def tool_turns(tokenizer, n_tools, final="All done."):
    """A responder: a tool call while fewer than ``n_tools`` tool results are in the prompt."""
    marker = tokenizer.convert_tokens_to_ids("<tool_response>")

    def respond(ids):
        seen = ids.count(marker)
        return call_text(text=f"t{seen}") if seen < n_tools else final

    return respond


def prompts(n):
    return [
        {"id": f"p{i}", "messages": [SYSTEM, {"role": "user", "content": f"question {i}"}]}
        for i in range(n)
    ]


def trainable(out):
    return [t for t, label in zip(out["input_ids"], out["labels"]) if label != -100]


def test_token_exact_sequence_labels_and_logprobs(tokenizer, template):
    sampler = ScriptedSampler(template, tool_turns(tokenizer, 2))
    rollout = MultiTurnRollout(sampler, template, ToolManager([Echo()]), max_turns=5)
    outs = rollout(prompts(3))
    assert sampler.calls == 3  # one batched call per turn for the whole batch
    for out in outs:
        assert (out["stop_reason"], out["turns"], out["truncated"]) == ("stop", 3, False)
        roles = [m["role"] for m in out["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
        for i in (2, 4):
            assert (
                out["messages"][i + 1]["tool_call_id"] == out["messages"][i]["tool_calls"][0]["id"]
            )
            assert out["messages"][i + 1]["tool_call_id"] == f"call_{i // 2}_0"
        assert (
            out["messages"][3]["content"] == "echo t0"
            and out["messages"][-1]["content"] == "All done."
        )
        # The sequence is exactly one rendering of the final conversation (bridges included),
        # ending on the last sampled <|im_end|>.
        rendered = template.render(out["messages"], [Echo().tool_info()])
        assert tokenizer.decode(out["input_ids"]) == rendered.rstrip("\n")
        assert len(out["input_ids"]) == len(out["labels"])
        # Trainable labels are exactly the sampled turns, each closed by <|im_end|>.
        sampled = (
            template.encode_text(call_text(text="t0"))
            + [2]
            + template.encode_text(call_text(text="t1"))
            + [2]
            + template.encode_text("All done.")
            + [2]
        )
        assert trainable(out) == sampled
        assert out["logprobs"] == [token_logprob(t) for t in sampled]
        assert [e["type"] for e in out["turn_log"]] == ["llm", "tool", "llm", "tool", "llm"]
        assert out["turn_log"][0]["batch_size"] == 3 and out["turn_log"][0]["completion_tokens"] > 0


def test_max_turns_length_and_caps(tokenizer, template):
    always = ScriptedSampler(template, tool_turns(tokenizer, 99))
    out = MultiTurnRollout(always, template, ToolManager([Echo()]), max_turns=2)(prompts(1))[0]
    assert (out["stop_reason"], out["truncated"], out["turns"]) == ("max_turns", True, 2)
    assert [m["role"] for m in out["messages"]].count("tool") == 1
    assert out["input_ids"][-1] == 2 and out["labels"][-1] == 2  # no bridge after the last turn

    out = MultiTurnRollout(
        always, template, ToolManager([Echo()]), sampling_params=SamplingParams(max_tokens=4)
    )(prompts(1))[0]
    assert (out["stop_reason"], out["truncated"], out["turns"]) == ("length", True, 1)
    assert len(trainable(out)) == 4 == len(out["logprobs"])

    prompt_len = len(template.encode(prompts(1)[0]["messages"], [Echo().tool_info()]))
    for cap in (prompt_len + 5, prompt_len + 40):  # inside the first turn, inside a bridge
        out = MultiTurnRollout(
            always, template, ToolManager([Echo()]), max_turns=6, max_trajectory_tokens=cap
        )(prompts(1))[0]
        assert (out["stop_reason"], out["truncated"]) == ("length", True)
        assert len(out["input_ids"]) == len(out["labels"]) == cap
        assert out["logprobs"] == [token_logprob(t) for t in trainable(out)]

    out = MultiTurnRollout(always, template, ToolManager([Echo()]), max_trajectory_tokens=5)(
        prompts(1)
    )[0]
    assert out["stop_reason"] == "length" and out["turns"] == 0 and "PromptTooLong" in out["error"]


def test_bad_input_and_faults_are_data(tokenizer, template):
    class Raising(ToolManager):
        def __call__(self, tool_call):
            raise OSError("sandbox gone")

    sampler = ScriptedSampler(template, tool_turns(tokenizer, 1))
    batch = [prompts(1)[0], {"messages": []}, {"messages": [{"role": "robot", "content": "x"}]}, 42]
    out = MultiTurnRollout(sampler, template, ToolManager([Echo()]))(batch)
    assert [o["stop_reason"] for o in out] == [
        "stop",
        "invalid_input",
        "invalid_input",
        "invalid_input",
    ]
    out = MultiTurnRollout(sampler, template, Raising([Echo()]))(prompts(2))
    assert [o["stop_reason"] for o in out] == ["api_error"] * 2
    assert out[0]["error"] == "ToolExecution OSError: sandbox gone"

    broken = ScriptedSampler(template, lambda ids: "<tool_call>{not json</tool_call>")
    out = MultiTurnRollout(broken, template, ToolManager([Echo()]), max_turns=2)(prompts(1))[0]
    assert out["messages"][3]["content"] == 'Error: tool_call missing "function.name".'
    assert out["stop_reason"] == "max_turns"


class FailingSampler:
    def __init__(self, mode):
        self.mode = mode

    def sample(self, prompts, sampling_params):
        if self.mode == "raise":
            raise RuntimeError("CUDA out of memory")
        if self.mode == "short":
            return []
        if self.mode == "nolp":
            return [SampleResponse([SampledSequence("stop", [5, 2], None)]) for _ in prompts]
        return [SampleResponse([SampledSequence("stop", [5, 2], [-0.1])]) for _ in prompts]


@pytest.mark.parametrize(
    ("mode", "reason", "message"),
    [
        ("raise", "error", "SamplerError: RuntimeError: CUDA out of memory"),
        ("short", "error", "sampler returned 0 responses for a batch of 2"),
        ("badlp", "error", "logprobs length (1) does not match sampled token count (2)"),
        ("nolp", "stop", None),
    ],
)
def test_sampler_faults(template, mode, reason, message):
    out = MultiTurnRollout(FailingSampler(mode), template, ToolManager())(prompts(2))
    assert [o["stop_reason"] for o in out] == [reason] * 2
    if message:
        assert message in out[0]["error"]
    else:
        assert out[0]["logprobs"] is None and "error" not in out[0]


def test_one_env_per_trajectory(tokenizer, template):
    class Ledger(Env):
        def __init__(self):
            self.seen = []

        def step(self, tool_name, arguments):
            self.seen.append(arguments["text"])
            return StepResult(observation=f"noted {arguments['text']}", reward=1.0)

        def tools(self):
            return [Echo().tool_info()]

    envs = [Ledger() for _ in range(3)]
    tools = [EnvTool.from_env(env) for env in envs]
    rollout = MultiTurnRollout(
        ScriptedSampler(template, tool_turns(tokenizer, 2)), template, max_turns=4
    )
    out = rollout(prompts(3), tool_manager=[ToolManager(t) for t in tools])
    assert [o["stop_reason"] for o in out] == ["stop"] * 3
    assert [env.seen for env in envs] == [["t0", "t1"]] * 3 and [
        t[0].episode_reward for t in tools
    ] == [2.0] * 3


def test_arguments_and_traces(tokenizer, template, tmp_path):
    sampler = ScriptedSampler(template, tool_turns(tokenizer, 1))
    with pytest.raises(ValueError, match="Template"):
        MultiTurnRollout(sampler, None)
    with pytest.raises(ValueError, match="max_turns"):
        MultiTurnRollout(sampler, template, max_turns=0)
    with pytest.raises(ValueError, match="num_samples"):
        MultiTurnRollout(sampler, template, sampling_params=SamplingParams(num_samples=2))
    rollout = MultiTurnRollout(
        sampler,
        template,
        ToolManager([Echo()]),
        trace_dir=tmp_path / "t",
        success_callback=lambda t: t["stop_reason"] == "stop",
    )
    with pytest.raises(TypeError, match="wrap a single trajectory"):
        rollout(prompts(1)[0])
    rollout(prompts(2), global_step=5)
    assert sorted(os.listdir(tmp_path / "t")) == ["step000005-ok-p0.json", "step000005-ok-p1.json"]
    record = json.loads((tmp_path / "t" / "step000005-ok-p0.json").read_text())
    assert "input_ids" not in record["trajectory"] and record["trajectory"]["turns"] == 2


def test_bridge_directly(tokenizer, template):
    history = [SYSTEM, {"role": "user", "content": "q"}, template.parse(call_text())]
    history[-1]["tool_calls"][0]["id"] = "c"
    result = [{"role": "tool", "tool_call_id": "c", "content": "r"}]
    # Ended on <|im_end|>: the bridge starts with the newline the template puts after it.
    assert tokenizer.decode(bridge_ids(template, history, result, None, 2)).startswith(
        "\n<|im_start|>user"
    )
    # Ended on a stop string (no end-of-turn token): the bridge closes the turn first.
    assert tokenizer.decode(bridge_ids(template, history, result, None, 50)).startswith(
        "<|im_end|>\n"
    )
    pif = {"input_ids": [1, 2], "labels": [-100, 2], "messages": history, "last_token_id": 2}
    new = extend_with_bridge(pif, result, template)
    assert new["input_ids"][:2] == [1, 2] and set(new["labels"][2:]) == {-100}
    assert new["messages"][-1] == result[0]
    with pytest.raises(RuntimeError, match="labels length"):
        extend_with_bridge({**pif, "labels": [1]}, result, template)

    class Forgetful:  # renders only the last message: history is not a prefix
        stop_token_ids = template.stop_token_ids

        def render(self, messages, tools=None, add_generation_prompt=False):
            return template.render(messages[-1:], tools, add_generation_prompt)

    with pytest.raises(RuntimeError, match="prefix-extension"):
        bridge_ids(Forgetful(), history, result, None, 2)


def test_a_hanging_tool_is_bounded_by_its_timeout(tokenizer, template):
    import threading

    release = threading.Event()

    class Hang(Echo):
        def __call__(self, tool_name, arguments):
            release.wait(10)
            return "late"

    sampler = ScriptedSampler(template, tool_turns(tokenizer, 1))
    try:
        out = MultiTurnRollout(sampler, template, ToolManager([Hang()]), tool_timeout_s=0.2)(
            prompts(2)
        )
    finally:
        release.set()
    for o in out:
        assert o["stop_reason"] == "stop" and o["turns"] == 2
        assert o["messages"][3]["content"] == "Error: tool 'echo' timed out after 0.2 s"
        assert [e["error"] for e in o["turn_log"] if e["type"] == "tool"] == [True]
