"""Contract: every method and path the pinned e2b SDK sends, recorded at the server.

If an SDK upgrade moves an endpoint (as 2.51 moved create to ``POST /v2/sandboxes``), the
recorded set changes and this test fails, naming the difference. The same list is what an
AgentENV deployment must answer.
"""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest
from e2b import CommandExitException, Sandbox

from twinkle.sandbox import SandboxServer

from .conftest import API_KEY

pytestmark = pytest.mark.slow

EXPECTED = {
    # control plane
    ("POST", "/v2/sandboxes"),
    ("GET", "/v2/sandboxes"),
    ("GET", "/sandboxes/{id}"),
    ("POST", "/v2/sandboxes/{id}/connect"),
    ("POST", "/sandboxes/{id}/timeout"),
    ("DELETE", "/sandboxes/{id}"),
    # envd
    ("GET", "/health"),
    ("GET", "/files"),
    ("POST", "/files"),
    ("POST", "/process.Process/Start"),
    ("POST", "/process.Process/List"),
    ("POST", "/process.Process/SendInput"),
    ("POST", "/process.Process/CloseStdin"),
    ("POST", "/process.Process/SendSignal"),
    ("POST", "/filesystem.Filesystem/Stat"),
    ("POST", "/filesystem.Filesystem/ListDir"),
    ("POST", "/filesystem.Filesystem/MakeDir"),
    ("POST", "/filesystem.Filesystem/Move"),
    ("POST", "/filesystem.Filesystem/Remove"),
}


class Recorder:
    """ASGI middleware noting (method, path with ids replaced, status, sandbox header present)."""

    def __init__(self, app):
        self.app = app
        self.calls: list[list] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = re.sub(r"/sandboxes/i[0-9a-f]{20}", "/sandboxes/{id}", scope["path"])
        call = [scope["method"], path, 0, b"e2b-sandbox-id" in dict(scope["headers"])]
        self.calls.append(call)  # noted before the reply, so the client cannot outrun it

        async def watch(message):
            if message["type"] == "http.response.start":
                call[2] = message["status"]
            await send(message)

        await self.app(scope, receive, watch)


@pytest.fixture()
def recorded():
    srv = SandboxServer(port=0, api_key=API_KEY)
    recorder = Recorder(srv.app)
    srv.app = recorder
    with srv:
        yield srv, recorder


def test_sdk_endpoints_match_the_contract(recorded):
    srv, recorder = recorded
    kw = srv.sdk_kwargs()
    sbx = Sandbox.create(timeout=60, **kw)
    sbx.commands.run("echo hi")
    with pytest.raises(CommandExitException):
        sbx.commands.run("exit 1")
    handle = sbx.commands.run("cat", background=True, stdin=True)
    handle.send_stdin("x")
    sbx.commands.close_stdin(handle.pid)
    handle.wait()
    sleeper = sbx.commands.run("sleep 600", background=True)
    sbx.commands.list()
    sleeper.kill()
    sbx.files.write("/home/user/f.txt", "data")
    sbx.files.read("/home/user/f.txt")
    sbx.files.list("/home/user")
    sbx.files.get_info("/home/user/f.txt")
    sbx.files.make_dir("/home/user/d")
    sbx.files.rename("/home/user/f.txt", "/home/user/d/f.txt")
    sbx.files.remove("/home/user/d")
    Sandbox.connect(sbx.sandbox_id, **kw)
    sbx.set_timeout(60)
    sbx.get_info()
    Sandbox.list(**kw).next_items()
    assert sbx.is_running()
    sbx.kill()

    seen = {(method, path) for method, path, _, _ in recorder.calls}
    assert seen == EXPECTED, (
        f"e2b {version('e2b')} changed its endpoints (recorded with 2.63.0): "
        f"new {sorted(seen - EXPECTED)}, gone {sorted(EXPECTED - seen)}"
    )
    # Every call succeeded (the expected CommandExit is a 200 stream) and every envd call was
    # routed by header, not by host name, so the SDK never tried a public-cloud URL.
    assert all(0 < status < 400 for _, _, status, _ in recorder.calls), recorder.calls
    envd = [c for c in recorder.calls if not c[1].startswith(("/v2/", "/sandboxes"))]
    assert envd and all(has_header for *_, has_header in envd)
