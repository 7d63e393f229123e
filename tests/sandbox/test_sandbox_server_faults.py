"""Server crash and restart, the CLI, templates files and the bubblewrap requirement."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import Sandbox

from tests.net import free_port
from twinkle.envs import AgentEnv
from twinkle.sandbox import IsolationError, SandboxServer, Template, TemplateRegistry

from .conftest import sandbox_pids, wait_until

KEY = "fault-key"


def start_cli(port: int, root: Path, *extra: str, **popen: Any) -> tuple[subprocess.Popen, str]:
    """``twinkle sandbox serve`` as a real subprocess (``popen``: more ``Popen`` arguments);
    returns it and the URL it printed."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "twinkle",
            "sandbox",
            "serve",
            "--port",
            str(port),
            "--api-key",
            KEY,
            "--root",
            str(root),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    line = proc.stdout.readline().strip()  # printed only once connections are accepted
    assert line.startswith("http://127.0.0.1:"), (
        line,
        proc.stderr.read() if proc.poll() is not None else "",
    )
    return proc, line


@pytest.fixture()
def root_dir():
    """A sandbox root the unprivileged sandbox user can reach (pytest's tmp_path is private)."""
    path = Path(tempfile.mkdtemp(prefix="twinkle-test-root-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_cli_serves_and_cleans_up_on_sigterm(root_dir):
    tmp_path = root_dir
    proc, url = start_cli(0, tmp_path)
    try:
        assert httpx.get(url + "/health", headers={"X-API-KEY": KEY}).status_code == 200
        assert httpx.get(url + "/health").status_code == 401
        sbx = Sandbox.create(api_url=url, sandbox_url=url, api_key=KEY)
        assert sbx.commands.run("echo cli").stdout == "cli\n"
        sbx.commands.run("sleep 600", background=True)
        assert wait_until(lambda: sandbox_pids(sbx.sandbox_id) != [])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    # Shutdown killed the sandbox (its files were in its own tmpfs) and removed the folder.
    assert wait_until(lambda: sandbox_pids(sbx.sandbox_id) == [], timeout=5)
    assert not (tmp_path / sbx.sandbox_id).exists()


@pytest.mark.slow
def test_server_crash_and_restart_give_error_observations(root_dir):
    tmp_path = root_dir
    port = free_port()
    proc, url = start_cli(port, tmp_path)
    env = AgentEnv(template="base", api_url=url, api_key=KEY, request_timeout=5, command_timeout=5)
    try:
        env.reset()
        assert env.step("run_command", {"command": "echo up"}).observation == "up"
        proc.kill()  # a crash: no shutdown hook runs
        proc.wait(timeout=10)
        start = time.monotonic()
        for name, args in [
            ("run_command", {"command": "echo down"}),
            ("read_file", {"path": "a"}),
            ("write_file", {"path": "a", "content": "b"}),
        ]:
            result = env.step(name, args)
            # An unreachable server is an infrastructure failure: the episode ends with the
            # cause in info["env_failed"], never as a tool result for the model.
            assert result.observation.startswith("Error:") and result.done is True, result
            assert "unreachable" in str(result.info.get("env_failed", "")), result
        assert time.monotonic() - start < 60  # errors, not hangs
        proc, url = start_cli(port, tmp_path / "second")
        result = env.step("run_command", {"command": "echo after-restart"})
        assert result.observation.startswith("Error:") and "not found" in result.observation.lower()
        env.reset()  # a new episode works against the restarted server
        assert env.step("run_command", {"command": "echo again"}).observation == "again"
    finally:
        env.close()
        env.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


@pytest.mark.slow
def test_in_process_stop_kills_everything_and_turns_into_errors():
    srv = SandboxServer(port=0, api_key=KEY).start()
    env = AgentEnv(template="base", api_url=srv.url, api_key=KEY, request_timeout=5)
    env.reset()
    handle = env.sandbox.commands.run("sleep 600", background=True)  # an open stream
    assert wait_until(lambda: len(sandbox_pids(env.sandbox_id)) > 0)
    sandbox_id = env.sandbox_id
    srv.stop()  # must not wait for the open stream, and must kill its process
    assert wait_until(lambda: sandbox_pids(sandbox_id) == [])
    assert not srv.root.exists()
    assert env.step("run_command", {"command": "echo x"}).observation.startswith("Error:")
    with pytest.raises(Exception):
        handle.wait()
    env.close()
    srv.stop()  # idempotent


def test_templates_file_yaml_and_json(tmp_path):
    yaml_file = tmp_path / "t.yaml"
    yaml_file.write_text(
        "allow_unknown: false\ntemplates:\n  py:\n    memory_mb: 512\n    env: {A: '1'}\n"
        "    setup: echo hi\n"
    )
    reg = TemplateRegistry.from_file(yaml_file)
    assert reg.get("py") == Template(name="py", memory_mb=512, env={"A": "1"}, setup=("echo hi",))
    assert reg.get("base").name == "base"
    with pytest.raises(KeyError, match="known templates"):
        reg.get("other")
    json_file = tmp_path / "t.json"
    json_file.write_text(json.dumps({"allow_unknown": True, "templates": {"x": {"network": True}}}))
    reg = TemplateRegistry.from_file(json_file)
    assert reg.get("x").network and reg.get("anything").name == "anything"
    bad = tmp_path / "bad.yaml"
    bad.write_text("templates:\n  y:\n    memory: 5\n")
    with pytest.raises(ValueError, match="unknown keys"):
        TemplateRegistry.from_file(bad)
    bad.write_text("templates:\n  y:\n    memory_mb: -5\n")
    with pytest.raises(ValueError, match="memory_mb"):
        TemplateRegistry.from_file(bad)


def test_example_templates_file_loads():
    example = Path(__file__).resolve().parents[2] / "infra" / "sandbox" / "templates.example.yaml"
    reg = TemplateRegistry.from_file(example)
    assert "base" in reg.templates and len(reg.templates) > 1


@pytest.mark.slow
def test_failing_setup_fails_the_create():
    reg = TemplateRegistry(
        templates={"broken": Template(name="broken", setup=("echo oops >&2; exit 9",))}
    )
    with SandboxServer(port=0, api_key=KEY, templates=reg) as srv:
        with pytest.raises(Exception, match="exited 9"):
            Sandbox.create(template="broken", **srv.sdk_kwargs())
        assert srv.manager.sandboxes == {}


@pytest.mark.slow
def test_refuses_to_start_without_bubblewrap(monkeypatch):
    import twinkle.sandbox.server as server_module

    monkeypatch.setattr(server_module, "find_bwrap", lambda: None)
    with pytest.raises(IsolationError, match="unisolated"):
        SandboxServer(port=0, api_key=KEY)
    with SandboxServer(port=0, api_key=KEY, unisolated=True) as srv:
        assert not srv.isolated
        sbx = Sandbox.create(**srv.sdk_kwargs())
        sbx.files.write("/home/user/u.txt", "unisolated")
        assert (
            sbx.commands.run("cat u.txt; echo $HOME").stdout
            == f"unisolated{srv.root / sbx.sandbox_id / 'home'}\n"
        )
        sbx.kill()


def test_unreachable_root_is_a_clear_error(tmp_path):
    if os.geteuid() != 0:  # only a root server drops to another uid that needs the path
        tmp_path.chmod(0o700)
        return
    server = SandboxServer(port=0, api_key=KEY, root=tmp_path / "sandboxes")
    with pytest.raises(ValueError, match="not reachable by the sandbox user"):
        server.start()


@pytest.mark.slow
def test_runs_without_dropping_privileges_when_it_must(monkeypatch):
    # Hosts that forbid unprivileged user namespaces: a root server keeps its own uid.
    import twinkle.sandbox.server as server_module

    found = server_module.find_bwrap()
    assert found is not None
    monkeypatch.setattr(server_module, "find_bwrap", lambda: (found[0], False))
    with SandboxServer(port=0, api_key=KEY) as srv:
        assert srv.isolated and srv.isolation.spawn_kwargs() == {}
        sbx = Sandbox.create(**srv.sdk_kwargs())
        sbx.files.write("/home/user/x.txt", "kept")
        assert (
            sbx.commands.run("cat x.txt; echo more >> x.txt; touch /etc/nope || true").stdout
            == "kept"
        )
        assert sbx.files.read("/home/user/x.txt") == "keptmore\n"
        assert not Path("/etc/nope").exists()


def test_api_key_is_required(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(ValueError, match="API key"):
        SandboxServer(port=0)
    monkeypatch.setenv("E2B_API_KEY", "from-env")
    unstarted = SandboxServer(port=0)
    assert not unstarted.root.exists()  # nothing on disk before start()
    assert unstarted.env() == {
        "E2B_API_URL": "http://127.0.0.1:0",
        "E2B_SANDBOX_URL": "http://127.0.0.1:0",
        "E2B_API_KEY": "from-env",
    }
    assert os.environ["E2B_API_KEY"] == "from-env"


def test_sandboxes_work_with_server_descriptors_past_fd_setsize(sdk):
    """A server holding hundreds of live sandboxes has descriptors numbered 1024 and up, which
    ``select()`` cannot watch. A sandbox created then must still boot, run commands and serve
    files (it once died at boot with "init sent a malformed message")."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:  # the test needs room for 1,100 more descriptors
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) >= 1024
        sbx = Sandbox.create(**sdk)
        try:
            assert sbx.commands.run("echo booted").stdout == "booted\n"
            sbx.files.write("/home/user/n.txt", "past FD_SETSIZE")
            assert sbx.files.read("/home/user/n.txt") == "past FD_SETSIZE"
        finally:
            sbx.kill()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
def test_server_started_with_a_low_open_files_limit_holds_many_sandboxes(root_dir):
    """Many hosts start processes with a soft limit of 1,024 open files, or less; the server
    raises its own (up to the hard limit) so that sandboxes do not fail past a few hundred.
    Here the limit is 160 (about 25 sandboxes before the server raised it) and 60 live
    sandboxes each run a command."""
    import resource
    from concurrent.futures import ThreadPoolExecutor

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.fail(f"this host's hard open-files limit ({hard}) is too low for the test")
    proc, url = start_cli(
        0, root_dir, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (160, hard))
    )
    try:

        def create(_: int) -> Sandbox:
            return Sandbox.create(api_url=url, sandbox_url=url, api_key=KEY)

        with ThreadPoolExecutor(8) as pool:
            boxes = list(pool.map(create, range(60)))
            outs = list(pool.map(lambda b: b.commands.run("echo up").stdout, boxes))
            assert outs == ["up\n"] * 60
            list(pool.map(lambda b: b.kill(), boxes))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_sandbox_that_cannot_be_watched_fails_saying_why(sdk, monkeypatch):
    """An unexpected failure while attaching to a booted init ends that sandbox with the
    reason, instead of escaping the server's event loop and leaving the sandbox hanging."""
    import twinkle.sandbox.processes as processes

    def broken(pid, isolated):
        raise RuntimeError("pidfd unavailable")

    monkeypatch.setattr(processes, "_own_root_pidfd", broken)
    sbx = Sandbox.create(**sdk)
    try:
        with pytest.raises(Exception, match="cannot be watched.*pidfd unavailable"):
            sbx.commands.run("echo never")
    finally:
        sbx.kill()
