"""``stop_all``: an interrupted run cancels the rollouts in flight instead of waiting them out.

The flow's run guard calls it when the run is interrupted (SIGTERM, Ctrl-C): rollouts run in
the task runner's worker threads, which the flow engine waits for on its way out.
"""

from __future__ import annotations

import asyncio
import threading

from twinkle.rollout.runner import PolicyConfig, RolloutConfig, RolloutRunner, stop_all
from twinkle.testing.openai_server import OpenAIServer, echo


class _Shell:
    """The environment of one trajectory; counts those alive."""

    live = 0

    def __init__(self) -> None:
        type(self).live += 1

    def tools(self):
        return [{"type": "function", "function": {"name": "run", "parameters": {}}}]

    def step(self, tool_name, arguments):
        from twinkle.envs.base import StepResult

        return StepResult(observation="ok")

    def close(self) -> None:
        type(self).live -= 1


def test_stop_all_cancels_a_batch_waiting_on_the_model_and_releases_its_environments(
    monkeypatch,
):
    monkeypatch.setattr(_Shell, "live", 0)
    monkeypatch.setattr(RolloutRunner, "provision_sandbox", lambda self: (_Shell(), None))
    rows = [{"id": f"r{i}", "messages": [{"role": "user", "content": f"hi {i}"}]} for i in range(6)]
    with OpenAIServer(echo(), delay_ms=120_000) as slow:  # answers long after the test's end
        config = RolloutConfig(
            policy=PolicyConfig(base_url=slow.base_url, model="m"), concurrency=3
        )
        runner = RolloutRunner(config, {"api_url": "http://127.0.0.1:9", "api_key": "k"})
        outcome: dict[str, BaseException | None] = {}

        def roll() -> None:
            try:
                runner.run(rows)
                outcome["error"] = None
            except BaseException as exc:  # noqa: BLE001 - what the run ended with is the point
                outcome["error"] = exc

        worker = threading.Thread(target=roll, daemon=True)
        worker.start()
        while len(slow.requests) < 3 and worker.is_alive():  # all slots wait on the model
            worker.join(timeout=0.05)
        assert len(slow.requests) == 3
        assert stop_all() == 1
        worker.join(timeout=60)  # far below the model's 120 s answer: only a cancel ends it
        assert not worker.is_alive(), "the batch was not cancelled"
    assert isinstance(outcome["error"], asyncio.CancelledError)
    assert _Shell.live == 0  # every environment created was released
    assert stop_all() == 0  # the batch is no longer registered
