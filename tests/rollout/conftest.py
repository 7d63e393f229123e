"""Shared fixtures: one real scripted OpenAI-compatible server on 127.0.0.1 for the folder."""

import pytest

from twinkle.testing.openai_server import OpenAIServer, echo


@pytest.fixture(scope="session")
def chat_server():
    with OpenAIServer(echo()) as server:
        yield server


@pytest.fixture
def server(chat_server):
    """The session server, reset: each test sets ``server.responder`` and ``server.delay_s``."""
    chat_server.responder = echo()
    chat_server.delay_s = 0.0
    chat_server.requests.clear()
    yield chat_server
    chat_server.delay_s = 0.0


@pytest.fixture(scope="session")
def tokenizer():
    from twinkle.testing.tiny_lm import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def template(tokenizer):
    from twinkle.sampler.template import ChatTemplate

    return ChatTemplate(tokenizer)
