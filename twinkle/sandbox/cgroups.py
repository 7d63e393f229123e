"""Per-sandbox control groups: memory, process count and CPU limits the kernel enforces.

Each sandbox gets one group per controller, below a group of its server, below the cgroup the
server itself runs in (so an operator's limits on the server still hold for its sandboxes)::

    <mount>/<server's own cgroup>/twinkle-<pid>-<start time>-<random>/<sandbox id>

* cgroup v1 (one hierarchy per controller, e.g. ``/sys/fs/cgroup/memory``): ``memory``
  (``memory.limit_in_bytes``; ``memory.memsw.limit_in_bytes`` too, so swap does not extend it),
  ``pids`` (``pids.max``) and ``cpu`` (``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``).
* cgroup v2 (one unified hierarchy): ``memory.max`` with ``memory.swap.max`` 0, ``pids.max``
  and ``cpu.max``. The controllers must be enabled in the parents' ``cgroup.subtree_control``,
  which the kernel refuses while a parent holds processes; a server alone in its cgroup (a
  systemd service) moves itself into a ``server`` leaf of its own group first.

The memory group counts every process of the sandbox and the pages of its tmpfs mounts (they
are charged to the process that writes them). The sandbox's bubblewrap is moved into the group
right after it starts and before the sandbox's init runs any command (see
:meth:`SandboxCgroup.add_tree`): whatever it forks afterwards is born inside. Groups are
removed when the sandbox's init has been reaped; the groups of servers that are gone (killed
with SIGKILL) are removed by the next server's start, wherever they are. Only the standard
library is used; creating groups needs root, or a cgroup v2 subtree delegated to the server's
user.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

#: The controllers a sandbox is limited by, in the order they are reported.
CONTROLLERS = ("memory", "pids", "cpu")
#: The CFS period the CPU quota is expressed in (microseconds).
CPU_PERIOD_US = 100_000
_PREFIX = "twinkle-"


def _proc_start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot), or "" if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[-1].split()
    return "" if fields[0] in ("Z", "X") else fields[19]


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _mounts(mountinfo: str) -> tuple[dict[str, Path], Path | None]:
    """v1 mount points by controller, and the v2 mount point, from ``/proc/self/mountinfo``."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        point = Path(fields[4].replace("\\040", " "))
        if rest[0] == "cgroup2" and v2 is None:
            v2 = point
        elif rest[0] == "cgroup":
            for option in rest[2].split(","):
                if option in CONTROLLERS and option not in v1:
                    v1[option] = point
    return v1, v2


def _own_groups(proc_cgroup: str) -> tuple[dict[str, str], str | None]:
    """The server's own v1 group by controller, and its v2 group, from ``/proc/self/cgroup``."""
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        if hierarchy == "0" and names == "":
            v2 = path
        for name in names.split(","):
            if name in CONTROLLERS:
                v1[name] = path
    return v1, v2


@dataclass
class SandboxCgroup:
    """One sandbox's groups (one per controller on v1, one on v2)."""

    paths: list[Path]

    def add(self, pid: int) -> None:
        """Move the process ``pid`` into every group (ProcessLookupError if it is gone)."""
        for path in self.paths:
            _write(path / "cgroup.procs", str(pid))

    def add_tree(self, pid: int) -> list[int]:
        """Move ``pid`` and all its descendants in; returns the pids moved.

        Each process moves before its children are listed: a child it forks afterwards is
        born in the group, one forked before is in the list. Gone processes are skipped.
        """
        moved: list[int] = []
        pending = [pid]
        while pending:
            current = pending.pop()
            try:
                self.add(current)
            except ProcessLookupError:
                continue
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    continue
                raise
            moved.append(current)
            with contextlib.suppress(OSError, ValueError):
                children = Path(f"/proc/{current}/task/{current}/children").read_text()
                pending += [int(c) for c in children.split()]
        return moved

    def remove(self, timeout: float = 5.0) -> bool:
        """Remove the groups once their processes are gone; False if one stayed busy."""
        end = time.monotonic() + timeout
        left = list(self.paths)
        while left:
            for path in list(left):
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        log.warning("cannot remove cgroup %s: %s", path, exc)
                        left.remove(path)
                    continue
                left.remove(path)
            if not left:
                return True
            if time.monotonic() > end:
                log.warning("cgroups still busy, left behind: %s", ", ".join(map(str, left)))
                return False
            time.sleep(0.02)
        return True


@dataclass
class Cgroups:
    """The server's cgroup parents, one per controller it can enforce.

    Args:
        version: 1 or 2.
        parents: the server's group by controller (on v2 the same directory for all).
        missing: controller name -> why it cannot be enforced here.

    Use :func:`detect` to build one; ``Cgroups(1, {}, {...})`` enforces nothing.

    Example:
        >>> Cgroups(1, {}, {'memory': 'not mounted'}).enforced
        ()
    """

    version: int
    parents: dict[str, Path]
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def enforced(self) -> tuple[str, ...]:
        return tuple(c for c in CONTROLLERS if c in self.parents)

    def describe(self) -> dict[str, str]:
        """Each controller: ``"cgroup v1 <path>"`` where enforced, else why it is not."""
        return {
            c: f"cgroup v{self.version} {self.parents[c]}"
            if c in self.parents
            else f"not enforced: {self.missing.get(c, 'unavailable')}"
            for c in CONTROLLERS
        }

    def create(self, name: str, memory_bytes: int, pids: int, cpus: float) -> SandboxCgroup:
        """The groups of a new sandbox, limits set (OSError if the kernel refuses one)."""
        paths: list[Path] = []
        group = SandboxCgroup(paths)
        try:
            for controller in self.enforced:
                path = self.parents[controller] / name
                if path not in paths:
                    path.mkdir()
                    paths.append(path)
                self._limit(controller, path, memory_bytes, pids, cpus)
        except BaseException:
            group.remove(timeout=0)
            raise
        return group

    def _limit(self, controller: str, path: Path, memory: int, pids: int, cpus: float) -> None:
        quota = max(1000, int(cpus * CPU_PERIOD_US))
        if self.version == 1:
            if controller == "memory":
                _write(path / "memory.limit_in_bytes", str(memory))
                # Absent without swap accounting; must not be below the memory limit.
                with contextlib.suppress(FileNotFoundError):
                    _write(path / "memory.memsw.limit_in_bytes", str(memory))
            elif controller == "pids":
                _write(path / "pids.max", str(pids))
            else:
                _write(path / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(path / "cpu.cfs_quota_us", str(quota))
        elif controller == "memory":
            _write(path / "memory.max", str(memory))
            with contextlib.suppress(FileNotFoundError):
                _write(path / "memory.swap.max", "0")
        elif controller == "pids":
            _write(path / "pids.max", str(pids))
        else:
            _write(path / "cpu.max", f"{quota} {CPU_PERIOD_US}")

    def weigh(self, sandboxes: int) -> None:
        """Give the server's CPU group the weight of ``sandboxes`` ordinary processes.

        Each sandbox's group has the default weight among its siblings; without this, all
        sandboxes together would weigh as much as one process of the host when the CPUs are
        contended, where before each command weighed as one.
        """
        parent = self.parents.get("cpu")
        if parent is None:
            return
        n = max(1, sandboxes)
        with contextlib.suppress(OSError):
            if self.version == 1:
                _write(parent / "cpu.shares", str(min(1024 * n, 262_144)))
            else:
                _write(parent / "cpu.weight", str(min(100 * n, 10_000)))

    def close(self) -> None:
        """Remove the server's groups (each sandbox's must be gone already)."""
        for path in sorted(set(self.parents.values())):
            for child in _children(path):
                SandboxCgroup([child]).remove(timeout=1.0)
            SandboxCgroup([path]).remove(timeout=1.0)


def _children(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []


def _remove_stale_below(root: Path, depth: int = 4) -> None:
    """``_remove_stale`` in every group down to ``depth`` levels below a hierarchy's root.

    A server killed with SIGKILL leaves its (empty) groups behind, in whatever cgroup it ran;
    the next server removes them wherever it runs.
    """
    level = [root]
    for _ in range(depth):
        for parent in level:
            _remove_stale(parent)
        level = [c for p in level for c in _children(p) if not c.name.startswith(_PREFIX)]


def _remove_stale(parent: Path) -> None:
    """Remove ``twinkle-<pid>-<start>-<random>`` groups below ``parent`` whose server is gone."""
    for group in _children(parent):
        if not group.name.startswith(_PREFIX):
            continue
        pid, _, start = group.name[len(_PREFIX) :].partition("-")
        start = start.partition("-")[0]
        if pid.isdigit() and _proc_start_time(int(pid)) == start:
            continue  # its server runs
        for child in sorted(_children(group), reverse=True):
            with contextlib.suppress(OSError):
                child.rmdir()
        with contextlib.suppress(OSError):
            group.rmdir()


def detect(
    mountinfo: str | None = None, proc_cgroup: str | None = None, fs_root: Path = Path("/")
) -> Cgroups:
    """The limits this process can enforce, with the server's groups created.

    cgroup v1 controllers are used where mounted (hybrid hosts mount v1 and an empty v2);
    otherwise v2. ``mountinfo`` and ``proc_cgroup`` default to this process's own;
    ``fs_root`` prefixes the paths (tests use a fake tree).
    """
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if proc_cgroup is None:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    v1_mounts, v2_mount = _mounts(mountinfo)
    v1_own, v2_own = _own_groups(proc_cgroup)
    # Unique per server: one process may run several (each removes its own at stop).
    name = f"{_PREFIX}{os.getpid()}-{_proc_start_time(os.getpid())}-{secrets.token_hex(4)}"

    def under_root(path: Path) -> Path:
        return fs_root / str(path).lstrip("/")

    if any(c in v1_mounts for c in CONTROLLERS):
        parents: dict[str, Path] = {}
        missing: dict[str, str] = {}
        for controller in CONTROLLERS:
            if controller not in v1_mounts or controller not in v1_own:
                missing[controller] = "no cgroup v1 hierarchy mounted for it"
                continue
            own = under_root(v1_mounts[controller]) / v1_own[controller].lstrip("/")
            _remove_stale_below(under_root(v1_mounts[controller]))
            try:
                (own / name).mkdir(exist_ok=True)
            except OSError as exc:
                missing[controller] = f"cannot create a group in {own}: {exc.strerror}"
                continue
            parents[controller] = own / name
        return Cgroups(1, parents, missing)
    if v2_mount is None or v2_own is None:
        return Cgroups(2, {}, dict.fromkeys(CONTROLLERS, "no cgroup file system mounted"))
    _remove_stale_below(under_root(v2_mount))
    return _detect_v2(under_root(v2_mount) / v2_own.lstrip("/"), name)


def _detect_v2(own: Path, name: str) -> Cgroups:
    try:
        available = set((own / "cgroup.controllers").read_text().split())
    except OSError as exc:
        return Cgroups(2, {}, dict.fromkeys(CONTROLLERS, f"cannot read {own}: {exc.strerror}"))
    wanted = [c for c in CONTROLLERS if c in available]
    missing = {c: f"not delegated to {own}" for c in CONTROLLERS if c not in available}
    group = own / name
    try:
        group.mkdir(exist_ok=True)
        enable = " ".join(f"+{c}" for c in wanted)
        try:
            _write(own / "cgroup.subtree_control", enable)
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            # "No internal processes": leave the server's own group to a leaf, then retry.
            (group / "server").mkdir(exist_ok=True)
            _write(group / "server" / "cgroup.procs", str(os.getpid()))
            _write(own / "cgroup.subtree_control", enable)
        _write(group / "cgroup.subtree_control", enable)
    except OSError as exc:
        reason = f"cannot enable controllers below {own}: {exc.strerror}"
        return Cgroups(2, {}, {c: missing.get(c, reason) for c in CONTROLLERS})
    return Cgroups(2, dict.fromkeys(wanted, group), missing)
