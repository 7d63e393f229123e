"""flows.rollout.sandbox_endpoint: the flow's local sandbox server, started with the block and
released early once the rollout no longer needs it."""

import time

import httpx
import pytest

from flows.params import SandboxParams
from flows.rollout import sandbox_endpoint


@pytest.mark.slow
def test_local_server_serves_then_is_released_while_the_block_goes_on(monkeypatch):
    monkeypatch.delenv("E2B_API_URL", raising=False)
    with sandbox_endpoint(SandboxParams()) as endpoint:
        api = endpoint()
        assert httpx.get(f"{api['api_url']}/health", timeout=10).status_code < 500
        proc = endpoint._server.proc
        endpoint.release()  # SIGTERM, no wait: the block (the flow's logging) goes on at once
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is not None, "the released server kept running"
        assert endpoint() == api  # the endpoint it gave stays readable; nothing restarts
    assert proc.returncode is not None


def test_a_given_api_url_is_used_as_is_and_release_does_nothing(monkeypatch):
    monkeypatch.setenv("TWINKLE_TEST_KEY", "k-123")
    with sandbox_endpoint(
        SandboxParams(api_url="http://127.0.0.1:9", api_key_env="TWINKLE_TEST_KEY")
    ) as endpoint:
        endpoint.release()
        assert endpoint() == {"api_url": "http://127.0.0.1:9", "api_key": "k-123"}
