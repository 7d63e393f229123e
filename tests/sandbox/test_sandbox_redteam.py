"""Red-team probes against the real server through the real e2b SDK (issue 13).

Each test runs an attack a hostile agent's code could run and checks that it does not hold:
unread output that grows the server's memory, absurd request values, a cleanup that stalls
every other sandbox, a file API that reaches host paths, servers and folders left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import NotFoundException, Sandbox

from twinkle.sandbox import SandboxServer
from twinkle.sandbox.envd import envelope
from twinkle.sandbox.server import PID_FILE, ROOT_PREFIX, _start_time

from .conftest import API_KEY, host_view, sandbox_pids, wait_until

pytestmark = pytest.mark.slow


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MiB (from ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.fixture()
def root_dir() -> Iterator[Path]:
    """A sandbox root the unprivileged sandbox user can reach (pytest's tmp_path is private)."""
    path = Path(tempfile.mkdtemp(prefix="twinkle-redteam-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def cli_server(root_dir: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``twinkle sandbox serve`` in its own process, so that its memory can be measured."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "twinkle", "sandbox", "serve", "--port", "0"]
        + ["--api-key", API_KEY, "--root", str(root_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = (proc.stdout.readline() if proc.stdout else "").strip()
    assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else url
    try:
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- A: unread output is bounded ------------------------------------------------------------
def test_unread_output_floods_do_not_grow_the_server(cli_server):
    proc, url = cli_server
    sdk = {"api_url": url, "sandbox_url": url, "api_key": API_KEY}
    before = rss_mb(proc.pid)
    floods = [Sandbox.create(timeout=120, **sdk) for _ in range(10)]
    for i, sbx in enumerate(floods):
        # Output that no one ever reads, on stdout and on stderr, as fast as it can be made.
        stream = ">&2" if i % 2 else ""
        sbx.commands.run(f"yes {'flood' * 200} {stream}", background=True, timeout=0)
    peak = before
    for _ in range(16):
        time.sleep(0.5)
        peak = max(peak, rss_mb(proc.pid))
    assert peak < 200, f"server RSS {peak:.0f} MiB (was {before:.0f} MiB) under 10 floods"
    # The floods are blocked, not dropped, and other commands still get all of their output,
    # including one that writes far more than the window, read late.
    probe = floods[0]
    late = probe.commands.run("head -c 30000000 /dev/zero | tr '\\0' a", background=True)
    time.sleep(2)  # the window fills; the command blocks until its client reads
    assert late.wait().stdout == "a" * 30_000_000
    assert probe.commands.run("seq 1 200000").stdout == "".join(f"{i}\n" for i in range(1, 200001))
    peak = max(peak, rss_mb(proc.pid))
    assert peak < 200, f"server RSS {peak:.0f} MiB"
    ids = [s.sandbox_id for s in floods]
    for sbx in floods:
        sbx.kill()
    assert wait_until(lambda: all(sandbox_pids(i) == [] for i in ids), timeout=20)
    assert rss_mb(proc.pid) < 200


# -- B: request values are validated ------------------------------------------------------
def test_out_of_range_request_values_answer_400_and_leave_the_server_working(server, sdk):
    key = {"X-API-KEY": API_KEY}
    sbx = Sandbox.create(timeout=60, **sdk)
    envd = {"E2b-Sandbox-Id": sbx.sandbox_id, **key}
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for bad in ("1e20", "-1", "86401", "NaN", "Infinity", '"300"', "true", "[1]"):
                body = f'{{"templateID": "base", "timeout": {bad}}}'
                created = client.post("/v2/sandboxes", content=body, headers=key)
                assert created.status_code == 400, (bad, created.text)
                for action in ("timeout", "connect"):
                    answer = client.post(
                        f"/sandboxes/{sbx.sandbox_id}/{action}",
                        content=f'{{"timeout": {bad}}}',
                        headers=key,
                    )
                    assert answer.status_code == 400, (bad, action, answer.text)
            for body in ("[]", '"x"', "not json", '{"envVars": [1]}', '{"templateID": 5}'):
                assert client.post("/v2/sandboxes", content=body, headers=key).status_code == 400
            huge = '{"metadata": {"x": "' + "a" * (2 << 20) + '"}}'
            assert client.post("/v2/sandboxes", content=huge, headers=key).status_code == 400
            # envd calls: depth, pid and the timeout headers.
            listdir = "/filesystem.Filesystem/ListDir"
            for depth in (10**20, -1, 1.5, "deep"):
                answer = client.post(
                    listdir, json={"path": "/home/user", "depth": depth}, headers=envd
                )
                assert answer.status_code == 400, (depth, answer.text)
            ok = client.post(listdir, json={"path": "/home/user", "depth": 3}, headers=envd)
            assert ok.status_code == 200
            for pid in ("1e400", "-5", '"x"', "99999999999"):
                answer = client.post(
                    "/process.Process/SendSignal",
                    content=f'{{"process": {{"pid": {pid}}}, "signal": 9}}',
                    headers={**envd, "Content-Type": "application/json"},
                )
                assert answer.status_code == 400, (pid, answer.text)
            answer = client.post(
                "/process.Process/SendInput", content=b"{" + b" " * (17 << 20) + b"}", headers=envd
            )
            assert answer.status_code == 400
        # Through the SDK: the refusal is an error, and the sandbox keeps its old end.
        with pytest.raises(Exception, match="between"):
            sbx.set_timeout(10**20)
        with pytest.raises(Exception):
            Sandbox.create(timeout=10**20, **sdk)
        start = envelope({"process": {"cmd": "/bin/echo", "args": ["hi"]}})
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for bad in ({"Connect-Timeout-Ms": "1" * 11}, {"Keepalive-Ping-Interval": "0"}):
                headers = {**envd, "Content-Type": "application/connect+json", **bad}
                answer = client.post("/process.Process/Start", content=start, headers=headers)
                assert b'"invalid_argument"' in answer.content and b"hi" not in answer.content
        assert sbx.commands.run("echo still-works").stdout == "still-works\n"
        # Every client can still list, through HTTP and the SDK.
        with httpx.Client(base_url=server.url) as client:
            listed = client.get("/v2/sandboxes", headers=key)
            assert listed.status_code == 200
            assert sbx.sandbox_id in {s["sandboxID"] for s in listed.json()}
        assert sbx.sandbox_id in {s.sandbox_id for s in Sandbox.list(**sdk).next_items()}
    finally:
        sbx.kill()


# -- C: cleanup never blocks the server ---------------------------------------------------
def test_killing_a_sandbox_with_many_files_does_not_stall_the_others(server, sdk):
    big = Sandbox.create(timeout=120, **sdk)
    other = Sandbox.create(timeout=120, **sdk)
    make = (
        "import os\n"
        "for d in range(100):\n"
        "    os.makedirs(f'/home/user/many/{d}')\n"
        "    for f in range(500):\n"
        "        open(f'/home/user/many/{d}/{f}', 'w').close()\n"
    )
    big.files.write("/home/user/make.py", make)
    big.commands.run("python /home/user/make.py", timeout=120)
    init = host_view(server, big.sandbox_id)
    assert sum(1 for _ in (init / "root/home/user/many").rglob("*")) == 50_100
    try:
        big.kill()
        # The files are in the sandbox's own tmpfs: the kernel frees them with its mount
        # namespace, in the dying sandbox, never on the server's loop.
        times = []
        while init.exists() or len(times) < 3:
            start = time.monotonic()
            assert other.commands.run("echo ok").stdout == "ok\n"
            times.append(time.monotonic() - start)
            assert len(times) < 500, "the killed sandbox's init did not end"
        assert max(times) < 1.0, times
        assert wait_until(lambda: server.manager.cleaning == 0, timeout=60)
    finally:
        other.kill()


# -- D: the file API sees only the sandbox's view -----------------------------------------
def names_in(sbx: Sandbox, path: str) -> set[str]:
    """What ``ls -A`` lists at ``path`` inside the sandbox (the view the file API must match)."""
    return set(sbx.commands.run(f"ls -A {path}").stdout.split())


def listed(sbx: Sandbox, path: str) -> set[str]:
    """The names the file API lists at ``path``; none where it does not exist."""
    try:
        return {e.name for e in sbx.files.list(path)}
    except NotFoundException:
        return set()


def test_file_api_never_reaches_host_paths(server, sdk):
    a, b = Sandbox.create(timeout=60, **sdk), Sandbox.create(timeout=60, **sdk)
    secret = server.root / "host-secret.txt"  # a host file in a folder sandboxes never see
    secret.write_text("host secret")
    root = f"/proc/self/root{server.root}"
    try:
        a.files.write("/tmp/a-marker", "a")
        b.files.write("/tmp/b-marker", "b")
        # /proc/self/root is the sandbox's own root, not the server's.
        tmp = {e.name for e in a.files.list("/proc/self/root/tmp")}
        assert "a-marker" in tmp and "b-marker" not in tmp and server.root.name not in tmp
        assert tmp == names_in(a, "/tmp")
        host_root = {p.name for p in Path("/root").iterdir()} if Path("/root").is_dir() else set()
        listed_root = {e.name for e in a.files.list("/proc/self/root/root")}
        assert listed_root == names_in(a, "/root") and not listed_root & host_root - {""}
        assert listed(a, root) == set()  # the server's folder: hidden in the sandbox
        for probe in (
            f"{root}/host-secret.txt",
            f"{root}/{b.sandbox_id}",
            f"{root}/{b.sandbox_id}/tmp/b-marker",
            f"{server.root}/{b.sandbox_id}/tmp",
            f"/tmp/../{server.root}/{b.sandbox_id}",
        ):
            with pytest.raises(NotFoundException):
                a.files.get_info(probe)
            with pytest.raises(NotFoundException):
                a.files.list(probe)
        # /proc/self/fd: a process of the sandbox, not the server with its sockets and files.
        fds = a.files.list("/proc/self/fd")
        assert 0 < len(fds) < 8, fds
        for entry in fds:
            assert "socket:" not in (entry.symlink_target or ""), entry
            assert str(server.root) not in (entry.symlink_target or ""), entry
        # /etc/shadow: stat as the sandbox sees it, unreadable as in the sandbox.
        shadow = a.files.get_info("/proc/self/root/etc/shadow")
        assert shadow.size == int(a.commands.run("stat -c %s /etc/shadow").stdout)
        with pytest.raises(Exception):  # noqa: B017 - any refusal; the content must not leak
            a.files.read("/proc/self/root/etc/shadow")
        # Symlinks and `..` resolve in the sandbox's view too.
        a.commands.run(
            f"ln -s {server.root} /home/user/s && ln -s /proc/self/root/root /home/user/r"
        )
        assert listed(a, "/home/user/s") == set()
        assert {e.name for e in a.files.list("/home/user/r")} == names_in(a, "/root")
        with pytest.raises(NotFoundException):
            a.files.get_info(f"/home/user/s/{b.sandbox_id}")
        with pytest.raises(NotFoundException):
            a.files.list(f"/home/user/s/{b.sandbox_id}/tmp")
        dotdot = {e.name for e in a.files.list("/home/user/../../proc/self/root/tmp")}
        assert dotdot == tmp
        assert "host secret" not in a.commands.run(f"cat {root}/host-secret.txt || true").stdout
        # A FIFO is not read or written on the host: that would block the whole server.
        a.commands.run("mkfifo /home/user/fifo")
        with pytest.raises(Exception, match="not a regular file"):
            a.files.read("/home/user/fifo")
        with pytest.raises(Exception, match="not a regular file"):
            a.files.write("/home/user/fifo", "x")
        assert b.commands.run("echo alive").stdout == "alive\n"
    finally:
        secret.unlink()
        a.kill(), b.kill()


# -- E: no orphans -------------------------------------------------------------------------
def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie no one has reaped yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def test_a_new_server_removes_the_folders_of_dead_servers():
    tmp = Path(tempfile.gettempdir())
    dead = subprocess.Popen(["sleep", "30"])
    dead_owner = f"{dead.pid} {_start_time(dead.pid)}"
    dead.kill(), dead.wait()
    stale = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=tmp))  # a SIGKILLed server's folder
    (stale / "i0123456789abcdef0123" / "home").mkdir(parents=True)
    (stale / "i0123456789abcdef0123" / "home" / "work.txt").write_text("left behind")
    (stale / PID_FILE).write_text(dead_owner)
    live = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=tmp))  # a running server's folder
    (live / PID_FILE).write_text(f"{os.getpid()} {_start_time(os.getpid())}")
    unclaimed = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=tmp))  # one starting right now
    try:
        with SandboxServer(port=0, api_key=API_KEY) as srv:
            assert (srv.root / PID_FILE).read_text().split()[0] == str(os.getpid())
            assert wait_until(lambda: not stale.exists())
            assert live.is_dir() and unclaimed.is_dir()
    finally:
        for folder in (stale, live, unclaimed):
            shutil.rmtree(folder, ignore_errors=True)


PARENT = """
import json, time
from twinkle.sandbox.endpoint import LocalSandboxServer
server = LocalSandboxServer()
print(json.dumps({**server.endpoint(), "pid": server.proc.pid}), flush=True)
time.sleep(600)
"""


def test_a_server_started_for_a_run_dies_with_it():
    run = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        started = json.loads(run.stdout.readline() if run.stdout else "{}")
        url, pid = started["api_url"], started["pid"]
        sbx = Sandbox.create(api_url=url, sandbox_url=url, api_key=started["api_key"])
        sbx.commands.run("sleep 600", background=True)
        assert wait_until(lambda: sandbox_pids(sbx.sandbox_id) != [])
        folders = [
            p.parent
            for p in Path(tempfile.gettempdir()).glob(f"{ROOT_PREFIX}*/{PID_FILE}")
            if p.read_text().split()[0] == str(pid)
        ]
        assert len(folders) == 1
        run.kill()  # kill -9 of `twinkle run`: no shutdown code of its own runs
        run.wait()
        assert wait_until(lambda: gone(pid), timeout=5), "the sandbox server outlived its run"
        assert wait_until(lambda: sandbox_pids(sbx.sandbox_id) == [], timeout=5)
        assert wait_until(lambda: not folders[0].exists(), timeout=5)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
