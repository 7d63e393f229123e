"""A throwaway Ray cluster on this machine: a head and worker nodes as separate processes.

For tests and benchmarks of the Ray backend that must cross process and node boundaries
(``ray.init()`` in the test process would not). Each cluster lives in its own temp dir
with its own ports, so it never meets another Ray instance on the machine, and ``stop``
ends only the processes started for that temp dir (by their ids, never ``ray stop``,
which would stop every Ray instance of the user).

Example:
    >>> with LocalRayCluster(workers=2) as cluster:  # doctest: +SKIP
    ...     subprocess.run(['twinkle', 'curate', 'in.jsonl', '-o', 'out.jsonl',
    ...                     '--ray-address', cluster.address], env=cluster.env)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_ports() -> list[str]:
    return [
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}",
        f"--runtime-env-agent-port={_free_port()}",
        f"--metrics-export-port={_free_port()}",
        "--node-manager-port=0",
        "--object-manager-port=0",
    ]


def pids_of(temp_dir: str) -> list[int]:
    """Processes (other than this one and its parent) whose command line names ``temp_dir``."""
    if not temp_dir:  # an empty tag would match every process
        return []
    mine = {os.getpid(), os.getppid()}
    found = []
    tag = temp_dir.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if tag in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


class LocalRayCluster:
    """``workers`` nodes of ``cpus`` CPUs each, plus a head with ``head_cpus`` CPUs.

    ``address`` is the head's GCS address and ``env`` the environment a driver needs (token
    auth off, usage stats off, this repository importable on every node).
    """

    def __init__(
        self, workers: int = 2, cpus: int = 1, head_cpus: int = 0, object_store_mb: int = 100
    ) -> None:
        self.workers, self.cpus, self.head_cpus = workers, cpus, head_cpus
        self.store = str(object_store_mb * 2**20)
        self.temp_dir = ""
        self.address = ""
        self.env = dict(os.environ)
        self.env.update(
            RAY_AUTH_MODE="disabled",
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONPATH=os.pathsep.join([str(_REPO), self.env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
        )

    def _ray(self, *args: str) -> None:
        ray = str(Path(sys.executable).with_name("ray"))
        proc = subprocess.run(
            [ray, "start", *args], env=self.env, capture_output=True, text=True, timeout=180
        )
        if proc.returncode:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{proc.stderr[-3000:]}")

    def start(self) -> LocalRayCluster:
        # Short: Ray's socket paths under it must stay within the 107-byte limit.
        self.temp_dir = tempfile.mkdtemp(prefix="trc-", dir="/tmp")
        common = [f"--temp-dir={self.temp_dir}", f"--object-store-memory={self.store}",
                  "--disable-usage-stats"]  # fmt: skip
        try:
            self._ray(
                "--head", "--port=0", f"--num-cpus={self.head_cpus}", "--include-dashboard=false",
                f"--dashboard-port={_free_port()}", f"--ray-client-server-port={_free_port()}",
                *common, *_node_ports(),
            )  # fmt: skip
            self.address = (Path(self.temp_dir) / "ray_current_cluster").read_text().strip()
            for _ in range(self.workers):
                self._ray(
                    f"--address={self.address}", f"--num-cpus={self.cpus}", *common,
                    *_node_ports(),
                )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def pids(self) -> list[int]:
        """Processes of this cluster: those whose command line names its temp dir."""
        return pids_of(self.temp_dir)

    def stop(self) -> None:
        if not self.temp_dir:
            return
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while pids and time.monotonic() < deadline:
                time.sleep(0.2)
                pids = self.pids()
            if not pids:
                break
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.temp_dir = ""

    def __enter__(self) -> LocalRayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
