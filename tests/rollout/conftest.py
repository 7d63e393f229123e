"""This folder's name for the shared scripted OpenAI-compatible server (tests/conftest.py)."""

import pytest


@pytest.fixture
def server(chat_server):
    """The session server, reset: each test sets ``server.responder`` and ``server.delay_s``."""
    return chat_server
