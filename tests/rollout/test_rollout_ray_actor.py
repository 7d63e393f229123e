"""MultiTurnRollout as a Ray actor, the documented way, on a real one-CPU local cluster."""

import sys

import pytest
import ray

from twinkle.rollout import MultiTurnRollout
from twinkle.sampler import ScriptedSampler
from twinkle.tools import Tool, ToolManager

pytestmark = pytest.mark.slow


class Upper(Tool):
    def __call__(self, tool_name, arguments):
        return arguments.get("text", "").upper()

    def tool_info(self):
        return {"type": "function", "function": {"name": "upper", "parameters": {"type": "object"}}}


def respond(ids, marker):
    if marker in ids:
        return "done"
    return '<tool_call>\n{"name": "upper", "arguments": {"text": "ray"}}\n</tool_call>'


def test_documented_remote_usage(tokenizer, template):
    # pytest imports this file under a name Ray workers cannot import: ship it by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = tokenizer.convert_tokens_to_ids("<tool_response>")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        actor = MultiTurnRollout.remote(
            ScriptedSampler(template, lambda ids: respond(ids, marker)),
            template,
            ToolManager([Upper()]),
            max_turns=3,
        )
        batch = [
            {"id": f"r{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)
        ]
        out = ray.get(actor.__call__.remote(batch), timeout=120)
    finally:
        ray.shutdown()
    assert [o["id"] for o in out] == ["r0", "r1", "r2"]
    assert all(o["stop_reason"] == "stop" and o["turns"] == 2 for o in out)
    assert out[0]["messages"][2]["content"] == "RAY"
    assert len(out[0]["input_ids"]) == len(out[0]["labels"])


def test_api_rollout_as_ray_actors_over_the_lean_transport(chat_server):
    from twinkle.protocol.openai import OpenAI
    from twinkle.rollout import APIMultiTurnRollout
    from twinkle.testing.openai_server import tool_then_answer

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    chat_server.responder = tool_then_answer(1, "upper", {"text": "ray"}, answer="done")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        actors = [
            APIMultiTurnRollout.remote(
                OpenAI("m", api_key="x", base_url=chat_server.base_url, transport="lean"),
                ToolManager([Upper()]),
                max_turns=3,
            )
            for _ in range(2)
        ]
        batch = [
            {"id": f"r{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(4)
        ]
        shares = [batch[0::2], batch[1::2]]
        outs = ray.get([a.__call__.remote(s) for a, s in zip(actors, shares)], timeout=120)
    finally:
        ray.shutdown()
    assert [o["id"] for out in outs for o in out] == ["r0", "r2", "r1", "r3"]
    assert all(o["stop_reason"] == "stop" and o["turns"] == 2 for out in outs for o in out)
    assert outs[0][0]["messages"][2]["content"] == "RAY"
