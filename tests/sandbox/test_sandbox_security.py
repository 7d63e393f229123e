"""Isolation and fault tests: each one runs the attack for real and checks it fails."""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from e2b import AuthenticationException, CommandExitException, Sandbox

from twinkle.sandbox.network import find_slirp4netns

from .conftest import API_KEY, host_view, sandbox_pids, wait_until

pytestmark = pytest.mark.slow


def run(sbx: Sandbox, command: str, timeout: float = 30):
    """(exit code, stdout + stderr) of a command, whatever its exit code."""
    try:
        result = sbx.commands.run(command, timeout=timeout)
    except CommandExitException as exc:
        return exc.exit_code, exc.stdout + exc.stderr
    return result.exit_code, result.stdout + result.stderr


@pytest.fixture()
def pair(sdk):
    a, b = Sandbox.create(timeout=60, **sdk), Sandbox.create(timeout=60, **sdk)
    yield a, b
    a.kill(), b.kill()


@pytest.fixture()
def host_file():
    """A host file that sandboxes can see (read-only) but must never change."""
    directory = Path(tempfile.mkdtemp(prefix="twinkle-host-", dir="/var/tmp"))
    directory.chmod(0o755)
    target = directory / "host.txt"
    target.write_text("original")
    target.chmod(0o666)  # writable by anyone on the host: only the sandbox stops the write
    yield target
    shutil.rmtree(directory)


def test_cannot_write_outside_the_sandbox(pair, host_file):
    a, _ = pair
    assert run(a, f"cat {host_file}") == (0, "original")  # visible, so the attack is real
    code, out = run(a, f"echo pwned > {host_file}")
    assert code != 0 and "Read-only file system" in out
    for target in ("/etc/twinkle-pwned", "/usr/twinkle-pwned"):
        code, out = run(a, f"touch {target}")
        assert code != 0 and not Path(target).exists()
        with pytest.raises(Exception, match="read-only"):
            a.files.write(target, "x")
    # The files API must not follow a sandbox-made symlink out of the sandbox either.
    run(a, f"ln -s {host_file} /home/user/escape")
    with pytest.raises(Exception, match="Read-only file system"):
        a.files.write("/home/user/escape", "pwned through symlink")
    run(a, f"mkdir -p /home/user/d && ln -s {host_file.parent} /home/user/d/dir")
    with pytest.raises(Exception, match="Read-only file system"):
        a.files.write("/home/user/d/dir/host.txt", "pwned through a symlinked directory")
    assert host_file.read_text() == "original"


def test_cannot_read_another_sandboxs_files(pair, server):
    a, b = pair
    a.files.write("/home/user/secret.txt", "top-secret-a")
    a_root = host_view(server, a.sandbox_id) / "root"
    a_file = a_root / "home/user/secret.txt"
    assert a_file.read_text() == "top-secret-a"  # the attack target exists (on the host)
    assert b.commands.run("ls /home/user").stdout.split() == []
    code, out = run(
        b,
        f"cat {a_file} /proc/*/root/home/user/secret.txt; ls {server.root}; "
        "grep -rs top-secret-a /home /tmp /proc/*/root/home 2>/dev/null | head -1",
    )
    assert "top-secret-a" not in out
    with pytest.raises(Exception):
        b.files.read(str(a_file))
    with pytest.raises(Exception):
        b.files.read(f"/home/user/../../../{a_file}")
    run(b, f"ln -s {a_file} /home/user/link")
    try:
        leaked = b.files.read("/home/user/link")
    except Exception:  # noqa: BLE001 - any refusal to read the link means nothing leaked
        leaked = ""
    assert "top-secret-a" not in leaked


def test_no_network_unless_the_template_allows_it(sdk, server):
    connect = f"socket.create_connection(('127.0.0.1', {server.port}), timeout=3)"
    probe = f"python -c \"import socket; {connect}; print('connected')\""
    devices = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | xargs"
    closed = Sandbox.create(timeout=60, **sdk)
    opened = Sandbox.create(template="net", timeout=60, **sdk)
    try:
        code, out = run(closed, probe)
        assert code != 0 and "connected" not in out
        assert run(closed, devices) == (0, "lo\n")  # no way out at all
        # With network: a device of its own (slirp4netns), yet the server's loopback stays
        # out of reach (tests/sandbox/test_sandbox_limits.py checks more).
        assert find_slirp4netns() is not None, "isolated networking needs slirp4netns (apt-get)"
        assert run(opened, devices) == (0, "lo tap0\n")
        code, out = run(opened, probe)
        assert code != 0 and "connected" not in out
    finally:
        closed.kill(), opened.kill()


def test_fork_bomb_and_background_processes_are_gone_after_kill(sdk, server):
    sbx = Sandbox.create(template="small", timeout=60, **sdk)
    sbx.commands.run(
        "nohup sleep 1000 > /dev/null 2>&1 &  setsid sleep 1000 > /dev/null 2>&1 & sleep 600",
        background=True,
    )
    sbx.commands.run("bomb() { bomb | bomb & }; bomb; sleep 600", background=True)
    limit = server.templates.get("small").max_processes  # 48
    assert wait_until(lambda: len(sandbox_pids(sbx.sandbox_id)) >= limit // 2)
    # The process limit holds the bomb: the sandbox's processes (its init counts too) never
    # exceed it, however long the bomb keeps forking.
    counts = []
    for _ in range(20):
        counts.append(len(sandbox_pids(sbx.sandbox_id)))
        time.sleep(0.05)
    assert max(counts) <= limit, counts
    # The server and other sandboxes keep answering meanwhile.
    other = Sandbox.create(timeout=30, **sdk)
    assert other.commands.run("echo alive").stdout == "alive\n"
    other.kill()
    init = server.manager.sandboxes[sbx.sandbox_id].spawner._init
    assert sbx.kill()
    assert wait_until(lambda: sandbox_pids(sbx.sandbox_id) == [])
    assert wait_until(lambda: not (server.root / sbx.sandbox_id).exists())
    # The sandbox's bubblewrap and init are gone too, reaped by the server (no zombies).
    assert wait_until(lambda: init.returncode is not None)


def test_memory_limit_stops_a_big_allocation(sdk):
    sbx = Sandbox.create(template="small", timeout=60, **sdk)  # 256 MiB
    try:
        code, out = run(sbx, "python -c \"x = bytearray(1024 * 1024 * 1024); print('allocated')\"")
        assert code != 0 and "MemoryError" in out and "allocated" not in out
        assert run(sbx, "python -c \"x = bytearray(16 * 1024 * 1024); print('small ok')\"") == (
            0,
            "small ok\n",
        )
    finally:
        sbx.kill()


def test_cpu_time_limit_stops_a_busy_loop(sdk):
    sbx = Sandbox.create(template="small", timeout=60, **sdk)  # 2 CPU seconds
    try:
        code, out = run(sbx, 'python -c "while True: pass"', timeout=60)
        # SIGXCPU at the soft limit (the hard limit, one second later, would be SIGKILL).
        assert code == 128 + signal.SIGXCPU, (code, out)
        # A process that catches SIGXCPU is killed at the hard limit.
        catch = (
            'python -c "import signal; signal.signal(signal.SIGXCPU, lambda *a: None)\n'
            'while True: pass"'
        )
        code, out = run(sbx, catch, timeout=60)
        assert code == 128 + signal.SIGKILL, (code, out)
    finally:
        sbx.kill()


def test_requests_without_the_api_key_are_refused(server, sdk):
    with httpx.Client(base_url=server.url) as client:
        assert client.post("/v2/sandboxes", json={"templateID": "base"}).status_code == 401
        assert (
            client.post(
                "/v2/sandboxes", json={"templateID": "base"}, headers={"X-API-KEY": "wrong"}
            ).status_code
            == 401
        )
        assert client.get("/v2/sandboxes", headers={"X-API-KEY": "wrong"}).status_code == 401
        ok = client.post(
            "/v2/sandboxes", json={"templateID": "base"}, headers={"X-API-KEY": API_KEY}
        )
        assert ok.status_code == 201
        sid = ok.json()["sandboxID"]
        # envd calls need the sandbox's access token (or the API key)
        envd = {"E2b-Sandbox-Id": sid}
        assert (
            client.get("/files", params={"path": "/home/user/.profile"}, headers=envd).status_code
            == 401
        )
        assert (
            client.get(
                "/files",
                params={"path": "/home/user/.profile"},
                headers={**envd, "X-Access-Token": "guess"},
            ).status_code
            == 401
        )
        assert (
            client.get(
                "/files",
                params={"path": "/home/user/.profile"},
                headers={**envd, "X-Access-Token": ok.json()["envdAccessToken"]},
            ).status_code
            == 200
        )
        assert client.delete(f"/sandboxes/{sid}", headers={"X-API-KEY": API_KEY}).status_code == 204
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_url=server.url, sandbox_url=server.url, api_key="wrong")


def test_envd_requests_for_unknown_sandboxes_do_not_reveal_whether_they_exist(server, sdk):
    live = Sandbox.create(timeout=60, **sdk)
    ended = Sandbox.create(timeout=60, **sdk)
    ended_token = server.manager.access_token(ended.sandbox_id)
    ended.kill()
    try:
        with httpx.Client(base_url=server.url) as client:

            def health(sandbox_id: str, **headers: str) -> int:
                return client.get(
                    "/health", headers={"E2b-Sandbox-Id": sandbox_id, **headers}
                ).status_code

            # Any guessed token: the same 401 for a live, an ended and a never-created id.
            for sandbox_id in (live.sandbox_id, ended.sandbox_id, "i0123456789abcdef0123"):
                assert health(sandbox_id, **{"X-Access-Token": "guess"}) == 401
                assert health(sandbox_id) == 401
            # Another sandbox's valid token does not open this one either.
            live_token = server.manager.access_token(live.sandbox_id)
            assert health(ended.sandbox_id, **{"X-Access-Token": live_token}) == 401
            assert health("i0123456789abcdef0123", **{"X-Access-Token": live_token}) == 401
            # Only the holder of the id's own token (or the API key) learns it is gone: the 502
            # that the SDK reads as "not running".
            assert health(live.sandbox_id, **{"X-Access-Token": live_token}) == 204
            assert health(ended.sandbox_id, **{"X-Access-Token": ended_token}) == 502
            assert health("i0123456789abcdef0123", **{"X-API-KEY": API_KEY}) == 502
        assert live.is_running() and not ended.is_running()
    finally:
        live.kill()
