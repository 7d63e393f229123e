"""Per-sandbox limits the kernel enforces, and isolated networking (issue 13, items 1 and 4).

Red-team probes through the real e2b SDK against the real server: processes that together
take more memory than the sandbox has, files written past its disk, a fork bomb, busy loops,
and network probes from sandboxes with network towards each other and towards the host's
loopback. The limits need cgroups (root here); the tests that read them skip elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import CommandExitException, Sandbox, SandboxException

from twinkle.sandbox import IsolationError, SandboxServer
from twinkle.sandbox.cgroups import Cgroups, SandboxCgroup, detect
from twinkle.sandbox.network import find_slirp4netns

from .conftest import API_KEY, templates, wait_until

pytestmark = pytest.mark.slow


def cgroups_here() -> bool:
    """Whether this host lets the server create per-sandbox cgroups (root, a hierarchy)."""
    if os.geteuid() != 0:
        return False
    probe = detect()
    probe.close()
    return probe.enforced == ("memory", "pids", "cpu")


# These machines run the suite as root with cgroups and slirp4netns (.ci/run installs it):
# a missing piece is a broken set-up, so it fails rather than skips.
assert cgroups_here(), "per-sandbox cgroups need root and a cgroup hierarchy"
assert find_slirp4netns() is not None, "isolated networking needs slirp4netns (apt-get install)"


def run(sbx: Sandbox, command: str, timeout: float = 60) -> tuple[int, str]:
    """(exit code, stdout + stderr) of a command, whatever its exit code."""
    try:
        result = sbx.commands.run(command, timeout=timeout)
    except CommandExitException as exc:
        return exc.exit_code, exc.stdout + exc.stderr
    return result.exit_code, result.stdout + result.stderr


def group(server: SandboxServer, sbx: Sandbox, controller: str) -> Path:
    """The sandbox's cgroup directory for ``controller``."""
    cgroup = server.manager.sandboxes[sbx.sandbox_id].cgroup
    assert isinstance(cgroup, SandboxCgroup)
    assert server.cgroups is not None
    parent = server.cgroups.parents[controller]
    return next(p for p in cgroup.paths if p.parent == parent)


#: cgroup v1 file names and their v2 counterparts.
V2_NAMES = {
    "memory.limit_in_bytes": "memory.max",
    "memory.max_usage_in_bytes": "memory.peak",
    "memory.usage_in_bytes": "memory.current",
    "memory.oom_control": "memory.events",
}


def read_int(server: SandboxServer, path: Path, name: str) -> int:
    """An integer cgroup file, by its v1 name (the v2 counterpart on v2 hosts)."""
    assert server.cgroups is not None
    if server.cgroups.version == 2:
        name = V2_NAMES.get(name, name)
    return int((path / name).read_text())


def counters(path: Path) -> dict[str, int]:
    """``name value`` lines of a cgroup file (``memory.oom_control``, ``pids.events``...)."""
    out = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[name] = int(value)
    return out


# -- the report --------------------------------------------------------------------------
MOUNTINFO_V1 = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
PROC_CGROUP_V1 = "8:pids:/\n4:memory:/jobs/42\n1:cpu,cpuacct:/\n0::/\n"


def test_detect_finds_the_v1_hierarchies_below_the_servers_own_groups(tmp_path):
    for path in ("sys/fs/cgroup/cpu", "sys/fs/cgroup/memory/jobs/42", "sys/fs/cgroup/pids"):
        (tmp_path / path).mkdir(parents=True)
    stale = tmp_path / "sys/fs/cgroup/pids/twinkle-999999999-1-abcd"  # a dead server's
    (stale / "isandbox").mkdir(parents=True)
    cgroups = detect(MOUNTINFO_V1, PROC_CGROUP_V1, fs_root=tmp_path)
    assert cgroups.version == 1 and cgroups.enforced == ("memory", "pids", "cpu")
    assert cgroups.parents["memory"].parent == tmp_path / "sys/fs/cgroup/memory/jobs/42"
    assert cgroups.parents["pids"].name.startswith(f"twinkle-{os.getpid()}-")
    assert not stale.exists()
    assert cgroups.describe()["cpu"].startswith("cgroup v1 ")
    cgroups.close()
    assert not cgroups.parents["cpu"].exists()
    # No hierarchy at all: nothing is enforced, and the report says why.
    none = detect("27 1 254:0 / / rw - ext4 /dev/vda rw\n", "0::/\n", fs_root=tmp_path)
    assert none.enforced == () and none.describe()["pids"].startswith("not enforced: ")


def test_the_server_reports_the_limits_it_enforces(server):
    limits = server.limits()
    assert set(limits) == {"memory", "pids", "cpu", "disk", "network"}
    assert "tmpfs" in limits["disk"] and "slirp4netns" in limits["network"]
    if server.cgroups is not None and server.cgroups.enforced == ("memory", "pids", "cpu"):
        assert all(limits[c].startswith("cgroup v") for c in ("memory", "pids", "cpu"))


def test_serve_prints_its_limits_and_require_limits_starts_where_all_hold():
    root = Path("/tmp", f"twinkle-limits-{os.getpid()}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "twinkle", "sandbox", "serve", "--port", "0"]
        + ["--api-key", API_KEY, "--root", str(root), "--require-limits"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = (proc.stdout.readline() if proc.stdout else "").strip()
        if not url:  # refused: it must say which limit is missing
            err = proc.stderr.read() if proc.stderr else ""
            assert "limits required but not enforced" in err, err
            assert not cgroups_here(), err
            return
        proc.terminate()
        proc.wait(timeout=30)
        err = proc.stderr.read() if proc.stderr else ""
        for name in ("memory", "pids", "cpu", "disk", "network"):
            assert f"  {name} limit: " in err, err
        assert "not enforced" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def test_require_limits_refuses_to_start_when_one_is_missing(monkeypatch):
    monkeypatch.setattr("twinkle.sandbox.server.find_slirp4netns", lambda: None)
    monkeypatch.setattr(
        "twinkle.sandbox.server.detect", lambda: Cgroups(1, {}, {"memory": "not mounted"})
    )
    server = SandboxServer(port=0, api_key=API_KEY, templates=templates(), require_limits=True)
    with pytest.raises(IsolationError, match="memory: not mounted") as caught:
        server.start()
    assert "network: slirp4netns is not installed" in str(caught.value)
    assert not server.root.exists()  # nothing left behind
    # Without --require-limits the same host serves, and says what it does not enforce.
    server = SandboxServer(port=0, api_key=API_KEY, templates=templates())
    with server:
        assert server.limits()["memory"] == "not enforced: not mounted"
        assert server.limits()["network"].startswith("not enforced: slirp4netns")


# -- memory ------------------------------------------------------------------------------
def test_processes_together_cannot_exceed_the_sandboxs_memory(server, sdk):
    sbx = Sandbox.create(template="small", timeout=120, **sdk)  # 256 MiB
    try:
        memory = group(server, sbx, "memory")
        assert read_int(server, memory, "memory.limit_in_bytes") == 256 * 1024 * 1024
        # Four processes of 100 MiB each, every page written: each is within its own
        # address-space limit, together they need 400 MiB.
        hold = (
            "python -c \"import time; x = b'1' * (100 << 20); print('held', flush=True); "
            'time.sleep(20)"'
        )
        code, out = run(sbx, f"for i in 1 2 3 4; do {hold} & done; sleep 4; kill %1 %2 %3 %4")
        # A third would put the group past 256 MiB: the kernel kills one of them instead.
        assert "Killed" in out, out
        peak = read_int(server, memory, "memory.max_usage_in_bytes")
        assert peak <= 256 * 1024 * 1024, peak
        oom = "memory.oom_control" if server.cgroups.version == 1 else "memory.events"
        assert counters(memory / oom).get("oom_kill", 1) >= 1
        # The OOM kill hit the sandbox's command, not its init nor the server.
        assert sbx.commands.run("echo alive").stdout == "alive\n"
        other = Sandbox.create(timeout=30, **sdk)
        assert other.commands.run("echo fine").stdout == "fine\n"
        other.kill()
    finally:
        sbx.kill()


def test_files_in_the_sandboxs_tmpfs_count_against_its_memory(server, sdk):
    sbx = Sandbox.create(template="little-disk", timeout=60, **sdk)
    try:
        memory = group(server, sbx, "memory")
        before = read_int(server, memory, "memory.usage_in_bytes")
        assert run(sbx, "head -c 48M /dev/zero > /dev/shm/fill")[0] == 0
        after = read_int(server, memory, "memory.usage_in_bytes")
        assert after - before >= 40 * 1024 * 1024, (before, after)
    finally:
        sbx.kill()


# -- disk --------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["/home/user", "/tmp", "/dev/shm", "/root", "/home"])
def test_writing_2_gib_fails_past_the_disk_limit(server, sdk, where):
    sbx = Sandbox.create(template="little-disk", timeout=60, **sdk)  # disk_mb 64
    try:
        code, out = run(sbx, f"dd if=/dev/zero of={where}/fill bs=1M count=2048 2>&1")
        assert code != 0, out
        if where in ("/root", "/home"):  # not the sandbox's: read-only, as on E2B
            assert "Read-only file system" in out, out
            return
        assert "No space left on device" in out, out
        code, size = run(sbx, f"stat -c %s {where}/fill")
        assert code == 0 and int(size) <= 64 * 1024 * 1024, size
        # Freed when deleted: the sandbox writes again.
        assert run(sbx, f"rm {where}/fill && echo x > {where}/again && cat {where}/again") == (
            0,
            "x\n",
        )
    finally:
        sbx.kill()


def test_every_writable_path_is_the_sandboxs_own_and_sized(server, sdk):
    sbx = Sandbox.create(template="little-disk", timeout=60, **sdk)
    try:
        # Every directory the sandbox user can write, across the whole tree.
        code, out = run(
            sbx,
            "find / -xdev -writable -type d 2>/dev/null; "
            "for m in / /dev /proc /sys; do find $m -maxdepth 1 -writable -type d; done",
        )
        writable = {line for line in out.split() if line}
        # /proc and /dev/pts (pseudo-terminals) hold no files.
        allowed = ("/home/user", "/tmp", "/dev/shm", "/proc", "/dev/pts")
        stray = {p for p in writable if not p.startswith(allowed)}
        assert not stray, stray
        code, out = run(sbx, "df -k --output=target,size /home/user /tmp /dev/shm | tail -n +2")
        sizes = dict(line.split() for line in out.splitlines())
        assert sizes == {"/home/user": "65536", "/tmp": "65536", "/dev/shm": "65536"}, out
        # The file API writes into the same sized tmpfs, and says when it is full.
        sbx.files.write("/home/user/api.txt", "via the API")
        assert sbx.commands.run("cat /home/user/api.txt").stdout == "via the API"
        with pytest.raises(Exception, match="No space left|space"):
            for i in range(40):
                sbx.files.write(f"/tmp/chunk{i}", b"z" * (4 << 20))
    finally:
        sbx.kill()


def test_the_file_api_reaches_the_sandboxs_files_right_after_create(sdk):
    for _ in range(3):  # the init boots while the create answers: the API waits for it
        sbx = Sandbox.create(timeout=30, **sdk)
        try:
            sbx.files.write("/home/user/early.txt", "early")
            assert sbx.files.read("/home/user/early.txt") == "early"
            names = {e.name for e in sbx.files.list("/home/user")}
            assert {"early.txt", ".profile"} <= names
        finally:
            sbx.kill()


# -- processes and CPU -------------------------------------------------------------------
def test_a_fork_bomb_hits_the_sandboxs_pids_limit(server, sdk):
    sbx = Sandbox.create(template="small", timeout=60, **sdk)  # max_processes 48
    try:
        pids = group(server, sbx, "pids")
        assert int((pids / "pids.max").read_text()) == 48 + 1  # + its bubblewrap
        bomb = sbx.commands.run("bomb() { bomb | bomb & }; bomb; sleep 600", background=True)
        assert wait_until(lambda: counters(pids / "pids.events").get("max", 0) > 0)
        counts = []
        for _ in range(20):
            counts.append(int((pids / "pids.current").read_text()))
            time.sleep(0.05)
        assert max(counts) <= 49, counts
        # A command while the bomb holds every slot may be refused ("cannot fork"), but the
        # sandbox's init stays up.
        for _ in range(5):
            with contextlib.suppress(SandboxException):
                sbx.commands.run("echo during", timeout=10)
        assert server.manager.sandboxes[sbx.sandbox_id].spawner.alive
        other = Sandbox.create(timeout=30, **sdk)  # the server and others carry on
        assert other.commands.run("echo alive").stdout == "alive\n"
        other.kill()
        # The bombed sandbox survives its own bomb: once it is killed, commands run again.
        bomb.kill()
        assert wait_until(lambda: int((pids / "pids.current").read_text()) <= 3, timeout=30)
        assert sbx.commands.run("echo recovered").stdout == "recovered\n"
    finally:
        sbx.kill()
    # Its groups go once its init is reaped.
    assert wait_until(lambda: not pids.exists())


def test_the_cpu_limit_applies_to_the_whole_sandbox(server, sdk):
    sbx = Sandbox.create(timeout=60, **sdk)  # cpu_count 1
    try:
        cpu = group(server, sbx, "cpu")
        if server.cgroups.version == 1:
            assert int((cpu / "cpu.cfs_quota_us").read_text()) == 100_000
            assert int((cpu / "cpu.cfs_period_us").read_text()) == 100_000
        else:
            assert (cpu / "cpu.max").read_text().split() == ["100000", "100000"]
        run(sbx, "for i in 1 2 3; do timeout 1.5 sh -c 'while :; do :; done' & done; wait")
        stat = counters(cpu / "cpu.stat")
        assert stat["nr_periods"] > 0
        if os.cpu_count() and os.cpu_count() > 1 and os.getloadavg()[0] < os.cpu_count():
            assert stat["nr_throttled"] > 0, stat  # three busy loops, one CPU's quota
    finally:
        sbx.kill()


# -- network -----------------------------------------------------------------------------
CONNECT = (
    'python -c "import socket, sys; '
    "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); "
    "print('connected:', s.recv(64).decode())\" {host} {port}"
)


@pytest.fixture()
def host_loopback_service() -> Iterator[int]:
    """A service on the host's 127.0.0.1 only, answering ``host-secret``; yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"host-secret")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    listener.close()


def test_net_sandboxes_reach_neither_each_other_nor_the_host_loopback(sdk, host_loopback_service):
    a = Sandbox.create(template="net", timeout=60, **sdk)
    b = Sandbox.create(template="net", timeout=60, **sdk)
    try:
        server = (
            'python -c "import socket; s = socket.socket(); '
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 8765)); "
            "s.listen(); "
            "[c.sendall(b'a-secret') or c.close() for c in iter(lambda: s.accept()[0], 0)]\""
        )
        a.commands.run(server, background=True)
        assert wait_until(
            lambda: "a-secret" in run(a, CONNECT.format(host="127.0.0.1", port=8765))[1]
        )
        # b: its own 127.0.0.1 and 10.0.2.100 are its own; 10.0.2.2 would be the host's loopback.
        for host in ("127.0.0.1", "10.0.2.100", "10.0.2.2", "10.0.2.3"):
            code, out = run(b, CONNECT.format(host=host, port=8765))
            assert code != 0 and "a-secret" not in out, (host, out)
        # Neither reaches a service only on the host's loopback.
        for sbx in (a, b):
            for host in ("127.0.0.1", "10.0.2.2"):
                code, out = run(sbx, CONNECT.format(host=host, port=host_loopback_service))
                assert code != 0 and "host-secret" not in out, (host, out)
    finally:
        a.kill(), b.kill()


def test_net_sandboxes_have_slirp_addresses_gateway_and_dns(sdk):
    sbx = Sandbox.create(template="net", timeout=60, **sdk)
    try:
        assert run(sbx, "cat /etc/resolv.conf") == (0, "nameserver 10.0.2.3\n")
        code, out = run(sbx, "cat /proc/net/route")
        # Default route (destination 0) through 10.0.2.2 (little-endian hex 0202000A).
        assert any(f.split()[1:3] == ["00000000", "0202000A"] for f in out.splitlines()[1:]), out
        code, out = run(sbx, "cat /proc/net/fib_trie")
        assert "10.0.2.100" in out, out
    finally:
        sbx.kill()


@pytest.fixture()
def namespace_service() -> Iterator[tuple[str, int]]:
    """An HTTP service inside a network namespace this test creates, behind a veth pair.

    Stands for "the outside": the sandbox's traffic leaves through slirp4netns in the host's
    namespace and is routed over the veth into this namespace. Nothing else is contacted.
    """
    assert os.geteuid() == 0 and shutil.which("ip"), "needs root and iproute2 (apt-get)"
    tag = f"tw{os.getpid() % 100000}"
    ns, host_if, ns_if = f"{tag}ns", f"{tag}h", f"{tag}n"
    subnet = f"10.213.{os.getpid() % 250}"
    host_ip, ns_ip = f"{subnet}.1", f"{subnet}.2"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    service = None
    try:
        ip("netns", "add", ns)
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        ip("netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        service = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "http.server", "8099"]
            + ["--bind", ns_ip],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=Path(__file__).parent,
        )
        time.sleep(0.5)
        yield ns_ip, 8099
    except subprocess.CalledProcessError as exc:
        raise AssertionError(f"cannot create a test network namespace: {exc.stderr!r}") from exc
    finally:
        if service is not None:
            service.kill()
            service.wait(timeout=10)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def test_a_net_sandbox_reaches_a_service_outside_its_namespace(sdk, namespace_service):
    address, port = namespace_service
    fetch = (
        'python -c "import urllib.request, sys; '
        'print(urllib.request.urlopen(sys.argv[1], timeout=10).status)" '
        f"http://{address}:{port}/"
    )
    opened = Sandbox.create(template="net", timeout=60, **sdk)
    closed = Sandbox.create(timeout=60, **sdk)
    try:
        assert run(opened, fetch) == (0, "200\n")
        code, out = run(closed, fetch)  # the default template keeps no network
        assert code != 0 and "200" not in out
    finally:
        opened.kill(), closed.kill()
