"""Session-wide test settings: everything offline, every service on loopback; and the
fixtures that several test folders share (the Prefect API, the scripted OpenAI-compatible
server, the tiny tokenizer)."""

import os

import pytest

# No test may reach the internet or a cloud: the SDKs read these before any client exists.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


@pytest.fixture(scope="session")
def prefect_api():
    """One real Prefect API (SQLite-backed, in a temporary home) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        from prefect.settings import PREFECT_API_URL

        yield PREFECT_API_URL.value()


@pytest.fixture(scope="session")
def chat_server_session():
    """One real scripted OpenAI-compatible server on 127.0.0.1 for the session (see chat_server)."""
    from twinkle.testing.openai_server import OpenAIServer, echo

    with OpenAIServer(echo()) as server:
        yield server


@pytest.fixture
def chat_server(chat_server_session):
    """The session server, reset: each test sets its ``responder`` and ``delay_s``."""
    from twinkle.testing.openai_server import echo

    chat_server_session.responder = echo()
    chat_server_session.delay_s = 0.0
    chat_server_session.requests.clear()
    yield chat_server_session
    chat_server_session.delay_s = 0.0


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny test tokenizer (``twinkle.testing.tiny_lm``), with its chat template."""
    from twinkle.testing.tiny_lm import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def template(tokenizer):
    from twinkle.sampler.template import ChatTemplate

    return ChatTemplate(tokenizer)
