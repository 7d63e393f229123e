"""The files API of one sandbox, done on the host without ever following a symlink.

The server runs as a more privileged user than its sandboxes, so a path a sandbox controls
must never be resolved by the host: ``/home/user/x -> /etc/shadow`` would otherwise let the
files API read or overwrite host files. Every walk opens one component at a time relative to
the previous directory's file descriptor with ``O_NOFOLLOW`` (plain ``os`` calls with
``dir_fd``), starting from the sandbox's own directory. A path that meets a symlink raises
:class:`ThroughSymlink`; the caller then does the operation inside the sandbox instead, where
the link resolves in the sandbox's own view and with its own rights.

Paths outside ``/home/user`` and ``/tmp`` are the read-only host view: metadata is read on
the host (hidden directories answer "not found"), contents are read inside the sandbox, and
writes are refused as on a read-only file system.
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import stat as stat_mod
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from twinkle.sandbox.isolation import SANDBOX_HOME, SANDBOX_TMP

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ThroughSymlink(Exception):
    """The path goes through a symlink; do the operation inside the sandbox."""


class OutsideSandbox(Exception):
    """The path is in the read-only host view, not in the sandbox's own directories."""


def normalize(path: str) -> str:
    """An absolute, normalized sandbox path (relative paths are taken from ``/home/user``)."""
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
        sandbox_dir: the sandbox's host directory (holding ``home`` and ``tmp``).
        owner: host uid and gid given to everything the API creates.
        hidden: host directories that do not exist in the sandbox's view.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()); (d / 'home').mkdir(); (d / 'tmp').mkdir()
        >>> files = SandboxFiles(d, owner=(os.getuid(), os.getgid()))
        >>> _ = files.write('/home/user/a/b.txt', b'hi'); files.read('/home/user/a/b.txt')
        b'hi'
    """

    def __init__(
        self, sandbox_dir: Path, owner: tuple[int, int], hidden: tuple[str, ...] = ()
    ) -> None:
        self.sandbox_dir = sandbox_dir
        self.owner = owner
        self.hidden = hidden

    # -- path handling -------------------------------------------------------------------
    def _split(self, path: str) -> tuple[Path, list[str]]:
        """The writable base directory holding ``path`` and the components below it."""
        for prefix, sub in ((SANDBOX_HOME, "home"), (SANDBOX_TMP, "tmp")):
            if path == prefix or path.startswith(prefix + "/"):
                rest = path[len(prefix) :].strip("/")
                return self.sandbox_dir / sub, [c for c in rest.split("/") if c]
        raise OutsideSandbox(path)

    def _host_view(self, path: str) -> Path:
        """The host path of a read-only-view path, or FileNotFoundError if it is hidden."""
        if path != "/home":  # /home exists in the sandbox, holding only 'user'
            for hidden in self.hidden:
                if path == hidden or path.startswith(hidden.rstrip("/") + "/"):
                    raise FileNotFoundError(path)
        return Path(path)

    @contextmanager
    def _parent(self, path: str, create: bool = False) -> Iterator[tuple[int, str]]:
        """An fd of ``path``'s parent directory (walked without following links), the last name."""
        base, parts = self._split(path)
        if not parts:
            raise PermissionError(f"{path}: cannot replace a sandbox mount point")
        fd = os.open(base, _DIR_FLAGS)
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
            fd = os.open(base, _DIR_FLAGS)
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
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                    raise ThroughSymlink(path) from None
                raise
            with os.fdopen(fd, "rb") as fh:
                if stat_mod.S_ISDIR(os.fstat(fh.fileno()).st_mode):
                    raise IsADirectoryError(path)
                return fh.read()

    def write(self, path: str, data: bytes) -> dict[str, str]:
        """Create or replace the file, creating missing parent directories."""
        with self._parent(path, create=True) as (pfd, name):
            try:
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o644,
                    dir_fd=pfd,
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                    raise ThroughSymlink(path) from None
                raise
            with os.fdopen(fd, "wb") as fh:
                os.fchown(fh.fileno(), *self.owner)
                fh.write(data)
        return {"name": posixpath.basename(path), "type": "file", "path": path}

    def stat(self, path: str) -> dict[str, Any]:
        try:
            base, parts = self._split(path)
        except OutsideSandbox:
            host = self._host_view(path)
            st = os.lstat(host)
            return entry_info(path, st, os.readlink(host) if stat_mod.S_ISLNK(st.st_mode) else None)
        if not parts:
            return entry_info(path, os.stat(base))
        with self._parent(path) as (pfd, name):
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            target = os.readlink(name, dir_fd=pfd) if stat_mod.S_ISLNK(st.st_mode) else None
            return entry_info(path, st, target)

    def list_dir(self, path: str, depth: int = 1) -> list[dict[str, Any]]:
        """Entries below ``path`` down to ``depth`` levels (symlinked directories not entered)."""
        depth = max(depth, 1)
        try:
            self._split(path)
        except OutsideSandbox:
            return self._list_host(path, depth)
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

    def _list_host(self, path: str, depth: int) -> list[dict[str, Any]]:
        host = self._host_view(path)
        if path == "/home":
            return [entry_info("/home/user", os.stat(self.sandbox_dir / "home"))]
        out = []
        for name in sorted(os.listdir(host)):
            child = posixpath.join(path, name)
            try:
                st = os.lstat(self._host_view(child))
            except FileNotFoundError:
                continue
            out.append(
                entry_info(
                    child, st, os.readlink(host / name) if stat_mod.S_ISLNK(st.st_mode) else None
                )
            )
            if depth > 1 and stat_mod.S_ISDIR(st.st_mode):
                out.extend(self._list_host(child, depth - 1))
        return out

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
