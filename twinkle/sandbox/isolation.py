"""How a sandbox is isolated: under bubblewrap, or (opt-in only) as plain processes.

bubblewrap (``bwrap``) gives each sandbox a read-only view of the host root, its own
writable ``/home/user``, ``/tmp`` and ``/dev/shm`` (tmpfs mounts of the template's disk size,
in the sandbox's own mount namespace), fresh PID/IPC/UTS/mount/user/network namespaces, and
with network a ``tap0`` from slirp4netns (:mod:`twinkle.sandbox.network`). It runs
unprivileged, so no daemon and no root filesystem copy are needed. One bubblewrap process per
sandbox runs the sandbox's init (:mod:`twinkle.sandbox.spawner`), which starts every command
of the sandbox inside those namespaces, so the sandbox behaves as one OS. The whole sandbox
is limited by its cgroups (:mod:`twinkle.sandbox.cgroups`); each command also gets resource
limits the init sets inside the new user namespace, where the sandbox cannot raise them
again; there the process limit counts only that sandbox's processes (Linux 5.14+), so one
sandbox's fork bomb cannot starve another where the host has no pids cgroup.

The host uid the sandbox runs as must not be root: the kernel exempts root from the
process limit. A server started as root therefore runs its sandboxes as ``nobody``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from twinkle.errors import SandboxError
from twinkle.sandbox.processes import BOOTSTRAP
from twinkle.sandbox.templates import Template

log = logging.getLogger(__name__)

#: Where the sandbox's private directories appear inside it.
SANDBOX_HOME = "/home/user"
SANDBOX_TMP = "/tmp"
#: The uid/gid the sandbox sees itself as (E2B's ``user``).
SANDBOX_UID = 1000
#: The host uid a root server runs sandboxes as (``nobody``).
UNPRIVILEGED_UID = 65534

#: Where the init's Python is looked for inside a template's root.
_PYTHON_DIRS = ("/usr/local/bin", "/usr/bin", "/bin")


# Replaces /etc/profile inside sandboxes (read by the SDK's `bash -l`). Debian's own forks
# `id -u` on every login shell, which cost a third of a short command's time; the sandbox user
# is never root, so its branch is fixed here. /etc/profile.d scripts still run.
ETC_PROFILE = """\
PATH="/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
export PATH
if [ -d /etc/profile.d ]; then
  for i in /etc/profile.d/*.sh; do
    if [ -r "$i" ]; then . "$i"; fi
  done
  unset i
fi
"""


# The sandbox user's ~/.profile: E2B's PATH, with ~/.local/bin first (pip --user, the `python`
# link below on hosts with python3 only).
HOME_PROFILE = (
    'export PATH="$HOME/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
)


class IsolationError(SandboxError, RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


def find_bwrap() -> tuple[str, bool] | None:
    """``(path, drop_privileges)`` of a ``bwrap`` that can start sandboxes here, or None.

    As root, sandboxes run as ``nobody`` when unprivileged user namespaces allow it
    (``drop_privileges`` True); otherwise as root inside their namespaces, where the process
    limit does not hold (a warning is logged).
    """
    path = shutil.which("bwrap")
    if path is None:
        return None
    probe = [
        path,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-all",
        "--die-with-parent",
        "true",
    ]
    for drop in (True, False) if os.geteuid() == 0 else (False,):
        try:
            done = subprocess.run(
                probe, capture_output=True, timeout=10, check=False, **_drop_kwargs(drop)
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            if os.geteuid() == 0 and not drop:
                log.warning(
                    "bwrap works only as root here: sandboxes run as root in their "
                    "namespaces and the process limit does not apply"
                )
            return path, drop
    return None


def _drop_kwargs(drop: bool) -> dict[str, object]:
    if not drop:
        return {}
    return {"user": UNPRIVILEGED_UID, "group": UNPRIVILEGED_UID, "extra_groups": []}


@dataclass(frozen=True, slots=True)
class Isolation:
    """Builds the argv of a sandbox's init and the limits of its commands.

    Args:
        bwrap: path of the ``bwrap`` binary, or None to run commands unisolated (unsafe;
            opt-in only: the command sees and can write the whole host as the server user).
        server_root: the directory holding every sandbox (hidden inside sandboxes).
        drop_privileges: a root server runs sandboxes as ``nobody`` (see ``find_bwrap``).
        slirp4netns: path of ``slirp4netns``: sandboxes with network get their own network
            namespace with user-mode networking (:mod:`twinkle.sandbox.network`). Without it
            they share the server's network namespace, loopback included.

    Example:
        >>> iso = Isolation(bwrap=None, server_root=Path('/tmp/x'))
        >>> iso.init_argv(Template(name='base'), Path('/tmp/x/s1'), network=False)[-1]
        '{fd}'
        >>> iso.limits(Template(name='base'))['cpu']
        600
    """

    bwrap: str | None
    server_root: Path
    drop_privileges: bool = False
    slirp4netns: str | None = None

    def spawn_kwargs(self) -> dict[str, object]:
        """``subprocess`` keyword arguments that start commands as the sandbox's host user."""
        return _drop_kwargs(self.isolated and self.drop_privileges and os.geteuid() == 0)

    def owner(self) -> tuple[int, int]:
        """The host uid/gid that owns a sandbox's files, so that its commands can write them."""
        if self.spawn_kwargs():
            return UNPRIVILEGED_UID, UNPRIVILEGED_UID
        return os.geteuid(), os.getegid()

    @property
    def isolated(self) -> bool:
        return self.bwrap is not None

    def limits(self, template: Template) -> dict[str, int]:
        """The resource limits of each command (the spawner's ``limits`` message field)."""
        return {
            # Unisolated, the process limit would count all of the server user's processes.
            "nproc": template.max_processes if self.isolated else 0,
            "as": template.memory_mb * 1024 * 1024,
            "cpu": template.cpu_seconds,
        }

    def init_argv(self, template: Template, sandbox_dir: Path, network: bool) -> list[str]:
        """The argv of the sandbox's init: bwrap's mounts and namespaces, then the spawner.

        ``{fd}`` stands for the control socket's descriptor number. IsolationError if the
        template's root has no ``python3`` to run the spawner with.
        """
        if self.bwrap is None:
            return [sys.executable, "-I", "-S", "-c", BOOTSTRAP, "{fd}"]
        python = next(
            (
                f"{d}/python3"
                for d in _PYTHON_DIRS
                if Path(template.root, d[1:], "python3").exists()
            ),
            None,
        )
        if python is None:
            raise IsolationError(
                f"template {template.name!r}: its root {template.root} has no python3 in "
                f"{', '.join(_PYTHON_DIRS)}; the sandbox's init is a small Python program"
            )
        out = [self.bwrap, "--ro-bind", template.root, "/", "--dev", "/dev", "--proc", "/proc"]
        # Hide everything that is not this sandbox's: all sandboxes, other homes, root's home.
        # Read-only once the sandbox's own mounts are made below them (as on E2B, where the
        # user cannot write /home or /root): every writable path is sized and the sandbox's.
        read_only = ["/dev"]
        for hidden in (str(self.server_root), "/home", "/root"):
            if Path(template.root, hidden.lstrip("/")).is_dir():
                out += ["--tmpfs", hidden]
                covered = (SANDBOX_TMP, "/home", "/root")
                if not any(hidden.startswith(c + "/") for c in covered):
                    read_only.append(hidden)
        profile = self.server_root / ".etc-profile"
        if template.root == "/" and profile.is_file():
            out += ["--ro-bind", str(profile), "/etc/profile"]
        # The sandbox's own writable places: tmpfs mounts in its mount namespace, each sized
        # by the template's disk and all charged to its memory cgroup; they vanish with it.
        disk = str(template.disk_mb * 1024 * 1024)
        for path, mode in ((SANDBOX_HOME, "0755"), (SANDBOX_TMP, "1777"), ("/dev/shm", "1777")):
            out += ["--size", disk, "--perms", mode, "--tmpfs", path]
        home_profile = self.server_root / ".home-profile"
        if home_profile.is_file():  # Spawner.start opens {file:...} and passes its fd
            out += ["--perms", "0644", "--file", f"{{file:{home_profile}}}", "/home/user/.profile"]
        if not any(Path(template.root, d[1:], "python").exists() for d in _PYTHON_DIRS):
            out += ["--dir", "/home/user/.local/bin"]  # python3 only: give it a `python`
            out += ["--symlink", python, "/home/user/.local/bin/python"]
        resolv = self.server_root / ".resolv-slirp"
        slirp = network and self.slirp4netns is not None
        if slirp and resolv.is_file() and Path(template.root, "etc/resolv.conf").exists():
            out += ["--ro-bind", str(resolv), "/etc/resolv.conf"]
        for path in read_only:
            out += ["--remount-ro", path]
        out += [
            "--unshare-all",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--hostname",
            "sandbox",
            "--die-with-parent",
            # The init is the namespace's PID 1: the sandbox's processes cannot kill it.
            "--as-pid-1",
            "--chdir",
            SANDBOX_HOME,
        ]
        if network and not slirp:  # no slirp4netns: the host's network namespace, loopback too
            out.append("--share-net")
        return out + ["--", python, "-I", "-S", "-c", BOOTSTRAP, "{fd}"]

    def check_root(self) -> None:
        """ValueError if the sandbox user cannot reach ``server_root`` (bwrap binds by path)."""
        if not self.spawn_kwargs():
            return
        for directory in (self.server_root, *self.server_root.parents):
            mode = directory.stat().st_mode
            if not mode & 0o001 and directory.stat().st_uid != UNPRIVILEGED_UID:
                raise ValueError(
                    f"sandbox root {self.server_root} is not reachable by the sandbox user (uid "
                    f"{UNPRIVILEGED_UID}): {directory} is not world-searchable; choose a root "
                    "under "
                    "a directory such as /tmp or /var/lib"
                )

    def host_path(self, sandbox_dir: Path, path: str) -> Path:
        """Unisolated mode only: where a sandbox path lives on the host."""
        for prefix, sub in ((SANDBOX_HOME, "home"), (SANDBOX_TMP, "tmp")):
            if path == prefix or path.startswith(prefix + "/"):
                return sandbox_dir / sub / path[len(prefix) :].lstrip("/")
        return Path(path)
