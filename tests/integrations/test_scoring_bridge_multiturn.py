"""Real multi-turn rollouts of math tasks, scored through the rollout bridge.

``MultiTurnRollout`` runs with the deterministic ``ScriptedSampler`` and the tokenizer that
``twinkle.testing.tiny_lm`` trains locally, so every reply goes through the chat template,
token ids and the tool-call parser before ``score_trajectories`` reads it back.
"""

import json

import pytest

from twinkle.data_format import user_data_get
from twinkle.integrations.rollout_bridge import score_trajectories, trajectories_for
from twinkle.rollout import MultiTurnRollout
from twinkle.sampler import ScriptedSampler
from twinkle.tools import Tool, ToolManager


class Multiply(Tool):
    def __call__(self, tool_name, arguments):
        return str(int(arguments["a"]) * int(arguments["b"]))

    def tool_info(self):
        ints = {"type": "integer"}
        return {
            "type": "function",
            "function": {
                "name": "multiply",
                "parameters": {"type": "object", "properties": {"a": ints, "b": ints}},
            },
        }


def call(a, b):
    args = json.dumps({"a": a, "b": b})
    return f'<tool_call>\n{{"name": "multiply", "arguments": {args}}}\n</tool_call>'


# What the scripted policy does for each bundled math task, keyed by a phrase of its
# question: a tool call first (or not), then a final reply built from the tool's result.
PLANS = {
    # math-001 (answer 18): 24 * 7 = 168 by the tool, then 168 - 150.
    "24 muffins": (
        (24, 7),
        lambda product: f"{product} - 150 = {product - 150}, so \\boxed{{18}}.",
    ),
    # math-002 (answer 378): multiplies by one week instead of three -> wrong.
    "18 pages": ((18, 7), lambda product: f"He reads \\boxed{{{product}}} pages."),
    # math-003 (answer 120): no tool, no number -> unparsed.
    "420 km": (None, lambda _: "I cannot work out the speed."),
    # math-004 (answer 30): GSM8K-style final line after one tool call -> correct.
    "$40": ((40, 3), lambda product: f"The discount is {product // 12}.\n#### 30"),
    # math-005 (answer 87): calls the tool every turn and never answers -> max_turns.
    "48 pencils": ((3, 48), None),
}


@pytest.fixture(scope="module")
def template():
    from twinkle.sampler.template import ChatTemplate
    from twinkle.testing.tiny_lm import tiny_tokenizer

    return ChatTemplate(tiny_tokenizer())


def policy(tokenizer):
    response_open = tokenizer.convert_tokens_to_ids("<tool_response>")

    def respond(ids):
        text = tokenizer.decode(ids)
        plan = next(p for key, p in PLANS.items() if key in text)
        args, final = plan
        if args is None:
            return final(None)
        if ids.count(response_open) == 0 or final is None:
            return call(*args)
        # The tool's answer, read back from the rendered <tool_response> block.
        product = int(text.rsplit("<tool_response>\n", 1)[1].split("\n", 1)[0])
        return final(product)

    return respond


@pytest.fixture(scope="module")
def rolled_out(template):
    rows = trajectories_for("math", [0, 1, 2, 3, 4])
    rollout = MultiTurnRollout(
        ScriptedSampler(template, policy(template.tokenizer)),
        template,
        ToolManager([Multiply()]),
        max_turns=3,
    )
    return rollout(rows)


def test_rollouts_are_multi_turn_and_keep_task_references(rolled_out):
    by_id = {r["id"]: r for r in rolled_out}
    assert list(by_id) == [f"math/math-00{i}" for i in range(1, 6)]
    first = by_id["math/math-001"]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert first["messages"][2]["content"] == "168"
    assert first["messages"][-1]["content"] == "168 - 150 = 18, so \\boxed{18}."
    assert (first["stop_reason"], first["turns"], first["truncated"]) == ("stop", 2, False)
    assert by_id["math/math-003"]["turns"] == 1
    looped = by_id["math/math-005"]
    assert (looped["stop_reason"], looped["turns"], looped["truncated"]) == ("max_turns", 3, True)
    for row in rolled_out:
        assert user_data_get(row["user_data"], "env") == "tasks/math"
        assert len(row["input_ids"]) == len(row["labels"])


def test_scores_of_rollouts_give_outcomes_answers_and_totals(rolled_out):
    scores = score_trajectories(rolled_out)
    assert [s["id"] for s in scores] == [r["id"] for r in rolled_out]
    got = {s["id"]: (s["outcome"], s["extracted_answer"], s["rewards"]["total"]) for s in scores}
    assert got == {
        "math/math-001": ("correct", "18", 1.0),
        "math/math-002": ("wrong", "126", 0.0),
        "math/math-003": ("unparsed", None, 0.0),
        "math/math-004": ("correct", "30", 1.0),
        # Cut off mid tool call: no final text, so nothing to read.
        "math/math-005": ("unparsed", None, 0.0),
    }
    assert sum(s["rewards"]["total"] for s in scores) == 2.0
    # ``format`` (weight 0) tells a wrong number from no number at all.
    assert [s["rewards"]["format"] for s in scores] == [1.0, 1.0, 0.0, 1.0, 0.0]
    for s in scores:
        assert s["env"] == "tasks/math" and s["error"] is None
        assert s["bundle"].total == s["rewards"]["total"]
    assert [(s["stop_reason"], s["truncated"]) for s in scores][-1] == ("max_turns", True)


def test_a_rollout_that_lost_its_task_reference_is_an_error_row_not_a_crash(rolled_out):
    broken = dict(rolled_out[0], user_data=[("env", '"tasks/math"')])
    scores = score_trajectories([broken, rolled_out[0]], default=-1.0)
    assert [s["outcome"] for s in scores] == ["error", "correct"]
    assert scores[0]["rewards"] == {"total": -1.0, "score_error": -1.0}
    assert "task_index" in scores[0]["error"]
    assert sum(s["rewards"]["total"] for s in scores) == 0.0
