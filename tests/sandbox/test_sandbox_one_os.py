"""A sandbox is one OS: its commands share processes, network and files, as on E2B's VMs."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest
from e2b import CommandExitException, Sandbox

from .conftest import sandbox_pids, wait_until

pytestmark = pytest.mark.slow

PORT = 8765
# Retries until the server listens (it starts in the background), then prints the page.
FETCH = (
    'python -c "import time, urllib.request\n'
    "for _ in range(200):\n"
    "    try:\n"
    f"        print(urllib.request.urlopen('http://127.0.0.1:{PORT}/page.txt', timeout=5).read()"
    ".decode()); break\n"
    "    except OSError: time.sleep(0.05)\n"
    "else: raise SystemExit('unreachable')\""
)
# One attempt, for a sandbox that must not see the server at all.
PROBE_ONCE = (
    f"python -c \"import socket; socket.create_connection(('127.0.0.1', {PORT}), timeout=3); "
    "print('connected')\""
)
# Every process visible in the sandbox, as "pid cmdline", without depending on procps.
LIST_PROCESSES = (
    'python -c "import os\n'
    "for p in os.listdir('/proc'):\n"
    "    if p.isdigit():\n"
    "        try: print(p, open(f'/proc/{p}/cmdline', 'rb').read()"
    ".replace(b'\\0', b' ').decode())\n"
    '        except OSError: pass"'
)


@pytest.fixture()
def pair(sdk):
    a, b = Sandbox.create(timeout=60, **sdk), Sandbox.create(timeout=60, **sdk)
    yield a, b
    a.kill(), b.kill()


def test_background_server_is_reachable_from_the_next_command_only_in_its_sandbox(pair):
    a, b = pair
    a.files.write("/home/user/page.txt", "served from a")
    server = a.commands.run(
        f"python -m http.server {PORT} --bind 127.0.0.1 --directory /home/user", background=True
    )
    assert a.commands.run(FETCH, timeout=30).stdout == "served from a\n"
    # The same port in another sandbox is another network namespace: nothing listens there.
    with pytest.raises(CommandExitException) as refused:
        b.commands.run(PROBE_ONCE)
    assert "connected" not in refused.value.stdout
    assert "ConnectionRefusedError" in refused.value.stderr
    # Killing the background command stops its server for the later commands too.
    assert server.kill()
    assert wait_until(lambda: _run(a, PROBE_ONCE)[0] != 0)


def test_processes_of_earlier_commands_are_visible_and_signalable(pair):
    a, b = pair
    handle = a.commands.run("exec sleep 1234", background=True)

    def sleeping() -> set[str]:
        listing = a.commands.run(LIST_PROCESSES).stdout
        return {line.split(" ", 1)[0] for line in listing.splitlines() if "sleep 1234" in line}

    assert wait_until(lambda: sleeping() != set())  # its bash execs sleep a moment later
    assert sleeping() == {str(handle.pid)}  # the PID the SDK reports is the one inside the sandbox
    assert "sleep 1234" not in b.commands.run(LIST_PROCESSES).stdout
    # A later command can signal it, as on one machine; the first command then ends.
    a.commands.run(f"kill -TERM {handle.pid}")
    with pytest.raises(CommandExitException) as ended:
        handle.wait()
    assert ended.value.exit_code == 128 + signal.SIGTERM


def test_state_written_by_one_command_is_seen_by_the_next(sdk):
    sbx = Sandbox.create(timeout=60, **sdk)
    try:
        sbx.commands.run("mkfifo /tmp/fifo && (echo through-fifo > /tmp/fifo &)")
        assert sbx.commands.run("cat /tmp/fifo").stdout == "through-fifo\n"
    finally:
        sbx.kill()


def test_a_background_child_holding_the_output_does_not_block_the_command(sdk):
    sbx = Sandbox.create(timeout=60, **sdk)
    try:
        # `sleep` inherits stdout and keeps it open; the command still ends when bash exits.
        result = sbx.commands.run("sleep 600 & echo started", timeout=30)
        assert result.stdout == "started\n"
        assert "sleep 600" in sbx.commands.run(LIST_PROCESSES).stdout
    finally:
        assert sbx.kill()
    assert wait_until(lambda: sandbox_pids(sbx.sandbox_id) == [])


def test_the_init_dying_turns_into_errors_not_hangs(sdk, server):
    sbx = Sandbox.create(timeout=60, **sdk)
    try:
        handle = sbx.commands.run("sleep 600", background=True)
        init = server.manager.sandboxes[sbx.sandbox_id].spawner._init
        assert init is not None
        os.killpg(init.pid, signal.SIGKILL)  # as if the sandbox's init crashed
        with pytest.raises(CommandExitException) as killed:
            handle.wait()
        assert killed.value.exit_code == 128 + signal.SIGKILL
        with pytest.raises(Exception, match="init"):
            sbx.commands.run("echo after", timeout=30)
        assert wait_until(lambda: sandbox_pids(sbx.sandbox_id) == [])
    finally:
        sbx.kill()


def test_the_sandbox_cannot_kill_its_own_init(sdk):
    sbx = Sandbox.create(timeout=60, **sdk)
    try:
        listing = sbx.commands.run(LIST_PROCESSES).stdout
        processes = dict(line.split(" ", 1) for line in listing.splitlines() if " " in line)
        assert "python3 -I -S -c" in processes["1"]  # the init is the sandbox's PID 1
        # Each attack also kills the attacking command itself; the sandbox must survive it.
        for attack in ("kill -9 1", "kill -TERM 1", "pkill -9 -f python", "kill -9 -1"):
            _run(sbx, attack)
            assert sbx.commands.run("echo still here").stdout == "still here\n", attack
    finally:
        assert sbx.kill()


def test_a_template_root_without_python_is_a_clear_error():
    from twinkle.sandbox import SandboxServer, Template, TemplateRegistry

    empty_root = tempfile.mkdtemp(prefix="twinkle-empty-root-")
    try:
        reg = TemplateRegistry(templates={"bare": Template(name="bare", root=empty_root)})
        with SandboxServer(port=0, api_key="k", templates=reg) as srv:
            with pytest.raises(Exception, match="no python3"):
                Sandbox.create(template="bare", **srv.sdk_kwargs())
            assert srv.manager.sandboxes == {}
    finally:
        os.rmdir(empty_root)


def _run(sbx: Sandbox, command: str) -> tuple[int, str]:
    try:
        result = sbx.commands.run(command, timeout=30)
    except CommandExitException as exc:
        return exc.exit_code, exc.stdout + exc.stderr
    return result.exit_code, result.stdout + result.stderr
