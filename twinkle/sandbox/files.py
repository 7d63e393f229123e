"""The files API of one sandbox, done on the host without ever following a symlink.

The server runs as a more privileged user than its sandboxes, so a path a sandbox controls
must never be resolved by the host: ``/home/user/x -> /etc/shadow`` would otherwise let the
files API read or overwrite host files. Every walk opens one component at a time relative to
the previous directory's file descriptor with ``O_NOFOLLOW`` (plain ``os`` calls with
``dir_fd``), starting from the sandbox's own ``/home/user`` or ``/tmp``: size-limited tmpfs
mounts in the sandbox's mount namespace, reached through ``/proc/<init>/root``. A path that
meets a symlink raises :class:`ThroughSymlink`; the caller then does the operation inside the
sandbox instead, where the link resolves in the sandbox's own view and with its own rights.

Paths outside ``/home/user`` and ``/tmp`` (``/proc/self/root/...``, ``/etc``, anything the
sandbox sees read-only) are never touched on the host: they raise :class:`OutsideSandbox`,
and the caller reads, stats or lists them inside the sandbox, as the sandbox user in its own
mount and PID namespaces (:data:`IN_SANDBOX_SCRIPT`), so ``/proc/self`` is the helper's own
and everything the sandbox cannot see answers "not found". Writes there are refused as on a
read-only file system. Only regular files are read or written on the host (a FIFO would
block the server).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import posixpath
import shutil
import stat as stat_mod
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from twinkle.errors import SandboxError
from twinkle.sandbox.isolation import SANDBOX_HOME, SANDBOX_TMP
from twinkle.sandbox.processes import InitError, Spawner, pidfd_exited

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Where ``home`` and ``tmp`` are below an isolated sandbox's root.
_MOUNTS = {"home": SANDBOX_HOME.strip("/").split("/"), "tmp": SANDBOX_TMP.strip("/").split("/")}
#: Stat or list a path inside the sandbox: ``python3 -I -S -c SCRIPT stat|list PATH DEPTH``.
#: Prints a JSON list of ``[path, mode, size, mtime, symlink target or null]``, or on failure
#: the errno name and message on stderr (exit status 3). Runs on the template's python3.
IN_SANDBOX_SCRIPT = """
import errno, json, os, stat, sys
def info(p):
    st = os.lstat(p)
    return [p, st.st_mode, st.st_size, st.st_mtime,
            os.readlink(p) if stat.S_ISLNK(st.st_mode) else None]
def walk(p, depth, out):
    with os.scandir(p) as it:
        names = sorted(e.name for e in it)
    for name in names:
        child = p.rstrip('/') + '/' + name
        try:
            out.append(info(child))
        except FileNotFoundError:
            continue
        if depth > 1 and stat.S_ISDIR(out[-1][1]):
            try:
                walk(child, depth - 1, out)
            except OSError:
                pass
op, path, depth = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    out = [info(path)] if op == 'stat' else []
    if op == 'list':
        walk(path, depth, out)
except OSError as e:
    sys.stderr.write(errno.errorcode.get(e.errno, 'EIO') + ' ' + (e.strerror or str(e)))
    sys.exit(3)
sys.stdout.write(json.dumps(out))
"""
_ERRNO_EXCEPTIONS: dict[str, type[OSError]] = {
    "ENOENT": FileNotFoundError,
    "ENOTDIR": NotADirectoryError,
    "EACCES": PermissionError,
    "EPERM": PermissionError,
    "ELOOP": FileNotFoundError,
}


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class ThroughSymlink(SandboxError):
    """The path goes through a symlink; do the operation inside the sandbox."""


class OutsideSandbox(SandboxError):
    """The path is in the read-only host view, not in the sandbox's own directories."""


def normalize(path: str) -> str:
    """An absolute, normalized sandbox path (relative paths are taken from ``/home/user``)."""
    if not isinstance(path, str):
        raise ValueError(f"path must be a string, got {type(path).__name__}")
    if not path:
        raise ValueError("path must not be empty")
    if "\x00" in path:
        raise ValueError("path must not contain NUL")
    if not path.startswith("/"):
        path = posixpath.join(SANDBOX_HOME, path)
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/")  # normpath keeps a leading '//'


def _raise_if_symlink(exc: OSError, name: str, dir_fd: int, path: str) -> None:
    """Turn "O_NOFOLLOW/O_DIRECTORY met a symlink" into ThroughSymlink."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat_mod.S_ISLNK(st.st_mode):
            raise ThroughSymlink(path) from None


def in_sandbox_entries(exit_code: int, stdout: bytes, stderr: bytes, path: str) -> list[Any]:
    """The entries :data:`IN_SANDBOX_SCRIPT` printed, or the OSError it reported."""
    if exit_code != 0:
        name, _, message = stderr.decode(errors="replace").strip().partition(" ")
        error = _ERRNO_EXCEPTIONS.get(name, OSError)
        raise error(f"{path}: {message or name or f'exit code {exit_code}'}")
    out = []
    for entry_path, mode, size, mtime, target in json.loads(stdout):
        st = os.stat_result((mode, 0, 0, 0, 0, 0, size, 0, int(mtime), 0, 0.0, mtime, 0.0))
        out.append(entry_info(entry_path, st, target))
    return out


def entry_info(path: str, st: os.stat_result, target: str | None = None) -> dict[str, Any]:
    """envd's ``EntryInfo`` JSON for a path and its ``lstat``."""
    if stat_mod.S_ISDIR(st.st_mode):
        kind = "FILE_TYPE_DIRECTORY"
    elif stat_mod.S_ISLNK(st.st_mode):
        kind = "FILE_TYPE_SYMLINK"
    else:
        kind = "FILE_TYPE_FILE"
    info: dict[str, Any] = {
        "name": posixpath.basename(path) or "/",
        "type": kind,
        "path": path,
        "size": str(st.st_size),
        "mode": stat_mod.S_IMODE(st.st_mode),
        "permissions": stat_mod.filemode(st.st_mode),
        "owner": "user",
        "group": "user",
        "modifiedTime": datetime.fromtimestamp(st.st_mtime, UTC).isoformat().replace("+00:00", "Z"),
    }
    if target is not None:
        info["symlinkTarget"] = target
        info["isSymlink"] = True
    return info


class SandboxFiles:
    """File operations confined to one sandbox's ``home`` and ``tmp`` directories.

    Args:
        sandbox_dir: the sandbox's host directory (holding ``home`` and ``tmp``), where the
            sandbox's ``/home/user`` and ``/tmp`` are host folders (unisolated mode).
        owner: host uid and gid given to everything the API creates.
        init: isolated sandboxes, whose ``/home/user`` and ``/tmp`` are tmpfs mounts inside
            their own mount namespace: the sandbox's :class:`Spawner`, which gives the host PID
            and a pidfd of its init once it has booted. Walks then start at
            ``/proc/<pid>/root``, the sandbox's own root, and are refused if the init is gone
            meanwhile (its PID may name another process by then).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()); (d / 'home').mkdir(); (d / 'tmp').mkdir()
        >>> files = SandboxFiles(d, owner=(os.getuid(), os.getgid()))
        >>> _ = files.write('/home/user/a/b.txt', b'hi'); files.read('/home/user/a/b.txt')
        b'hi'
    """

    def __init__(
        self,
        sandbox_dir: Path,
        owner: tuple[int, int],
        init: Spawner | None = None,
    ) -> None:
        self.sandbox_dir = sandbox_dir
        self.owner = owner
        self._init = init

    async def ready(self) -> None:
        """Wait until the sandbox's files can be reached (its init has booted)."""
        if self._init is not None:
            await self._init.wait_ready()

    def _open_base(self, sub: str) -> int:
        """An fd of the sandbox's ``home`` (``/home/user``) or ``tmp`` directory."""
        if self._init is None:
            return os.open(self.sandbox_dir / sub, _DIR_FLAGS)
        pid, pidfd = self._init.root_process()
        # The magic link is followed (it is the sandbox's root); nothing below it is.
        fd = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in _MOUNTS[sub]:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
            if pidfd_exited(pidfd):  # exited: the PID may be another's now
                raise InitError("the sandbox's init is gone")
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- path handling -------------------------------------------------------------------
    def _split(self, path: str) -> tuple[str, list[str]]:
        """The writable base directory (``home``/``tmp``) of ``path``, the components below."""
        for prefix, sub in ((SANDBOX_HOME, "home"), (SANDBOX_TMP, "tmp")):
            if path == prefix or path.startswith(prefix + "/"):
                rest = path[len(prefix) :].strip("/")
                return sub, [c for c in rest.split("/") if c]
        raise OutsideSandbox(path)

    @contextmanager
    def _as_owner(self) -> Iterator[None]:
        """Act with the sandbox user's file-system ids (root server, isolated sandbox only).

        Its tmpfs belongs to its user namespace, where root's uid does not exist (creating a
        file as root fails with EOVERFLOW), and permissions are then checked as the sandbox
        user's. ``setfsuid`` changes only the calling thread, and nothing awaits meanwhile.
        """
        if self._init is None or os.geteuid() != 0 or self.owner[0] == 0:
            yield
            return
        libc = _libc()
        old_gid = libc.setfsgid(self.owner[1])
        old_uid = libc.setfsuid(self.owner[0])
        try:
            yield
        finally:
            libc.setfsuid(old_uid)
            libc.setfsgid(old_gid)

    @contextmanager
    def _parent(self, path: str, create: bool = False) -> Iterator[tuple[int, str]]:
        """An fd of ``path``'s parent directory (walked without following links), the last name."""
        with self._as_owner(), self._walk_parent(path, create) as found:
            yield found

    @contextmanager
    def _walk_parent(self, path: str, create: bool) -> Iterator[tuple[int, str]]:
        base, parts = self._split(path)
        if not parts:
            raise PermissionError(f"{path}: cannot replace a sandbox mount point")
        fd = self._open_base(base)
        try:
            for name in parts[:-1]:
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise FileNotFoundError(path) from None
                    os.mkdir(name, 0o755, dir_fd=fd)
                    os.chown(name, *self.owner, dir_fd=fd, follow_symlinks=False)
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    _raise_if_symlink(exc, name, fd, path)
                    raise
                os.close(fd)
                fd = nxt
            yield fd, parts[-1]
        finally:
            os.close(fd)

    @contextmanager
    def _dir(self, path: str) -> Iterator[int]:
        base, parts = self._split(path)
        if not parts:
            fd = self._open_base(base)
            try:
                yield fd
            finally:
                os.close(fd)
            return
        with self._parent(path) as (pfd, name):
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
            except OSError as exc:
                _raise_if_symlink(exc, name, pfd, path)
                raise
            try:
                yield fd
            finally:
                os.close(fd)

    # -- operations ----------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        """The file's bytes. Raises ThroughSymlink or OutsideSandbox for the in-sandbox path."""
        with self._parent(path) as (pfd, name):
            try:
                fd = os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=pfd
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                    raise ThroughSymlink(path) from None
                raise
            with os.fdopen(fd, "rb") as fh:
                mode = os.fstat(fh.fileno()).st_mode
                if stat_mod.S_ISDIR(mode):
                    raise IsADirectoryError(path)
                if not stat_mod.S_ISREG(mode):
                    raise ValueError(f"{path} is not a regular file")
                os.set_blocking(fh.fileno(), True)
                return fh.read()

    def write(self, path: str, data: bytes) -> dict[str, str]:
        """Create or replace the file, creating missing parent directories."""
        with self._parent(path, create=True) as (pfd, name):
            try:
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                    0o644,
                    dir_fd=pfd,
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                    raise ThroughSymlink(path) from None
                if exc.errno == errno.ENXIO:  # a FIFO without a reader
                    raise ValueError(f"{path} is not a regular file") from None
                raise
            with os.fdopen(fd, "wb") as fh:
                if not stat_mod.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    raise ValueError(f"{path} is not a regular file")
                os.set_blocking(fh.fileno(), True)
                os.ftruncate(fh.fileno(), 0)
                os.fchown(fh.fileno(), *self.owner)
                fh.write(data)
        return {"name": posixpath.basename(path), "type": "file", "path": path}

    def stat(self, path: str) -> dict[str, Any]:
        """The entry of ``path``; ThroughSymlink or OutsideSandbox: stat it in the sandbox."""
        base, parts = self._split(path)
        if not parts:
            fd = self._open_base(base)
            try:
                return entry_info(path, os.fstat(fd))
            finally:
                os.close(fd)
        with self._parent(path) as (pfd, name):
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            target = os.readlink(name, dir_fd=pfd) if stat_mod.S_ISLNK(st.st_mode) else None
            return entry_info(path, st, target)

    def list_dir(self, path: str, depth: int = 1) -> list[dict[str, Any]]:
        """Entries below ``path`` down to ``depth`` levels (symlinked directories not entered)."""
        depth = max(depth, 1)
        out: list[dict[str, Any]] = []
        with self._dir(path) as fd:
            self._walk(fd, path, depth, out)
        return out

    def _walk(self, fd: int, path: str, depth: int, out: list[dict[str, Any]]) -> None:
        for name in sorted(os.listdir(fd)):
            child = posixpath.join(path, name)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            target = os.readlink(name, dir_fd=fd) if stat_mod.S_ISLNK(st.st_mode) else None
            out.append(entry_info(child, st, target))
            if depth > 1 and stat_mod.S_ISDIR(st.st_mode):
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                try:
                    self._walk(sub, child, depth - 1, out)
                finally:
                    os.close(sub)

    def make_dir(self, path: str) -> None:
        """Create the directory and its parents; FileExistsError if it already exists."""
        with self._parent(path, create=True) as (pfd, name):
            os.mkdir(name, 0o755, dir_fd=pfd)
            os.chown(name, *self.owner, dir_fd=pfd, follow_symlinks=False)

    def remove(self, path: str) -> None:
        with self._parent(path) as (pfd, name):
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            if stat_mod.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=pfd)
            else:
                os.unlink(name, dir_fd=pfd)

    def move(self, source: str, destination: str) -> None:
        with (
            self._parent(source) as (sfd, sname),
            self._parent(destination, create=True) as (dfd, dname),
        ):
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
