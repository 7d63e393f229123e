"""A local E2B-compatible sandbox server, isolated with bubblewrap.

The unmodified ``e2b`` SDK (and so :class:`twinkle.envs.AgentEnv`) talks to it exactly as to
E2B or AgentENV: it serves E2B's control plane (create, connect, set timeout, kill, list,
info) and the in-sandbox daemon's protocol (process start with streamed output, stdin,
signals; file read, write, list, stat, make-dir, move, remove) on one loopback port. Each
sandbox is one bubblewrap instance with a read-only host root, its private writable
``/home/user``, ``/tmp`` and ``/dev/shm`` (size-limited tmpfs mounts), its own
PID/user/mount/IPC/UTS/network namespaces (no network unless the template allows it, then
user-mode networking through slirp4netns, :mod:`twinkle.sandbox.network`), and cgroups that
limit its memory, processes and CPUs as a whole (:mod:`twinkle.sandbox.cgroups`). A small
init inside it (:mod:`twinkle.sandbox.spawner`) starts every command, so the commands of one
sandbox share one OS as on E2B: a server started with
``background=True`` by one command is reachable on ``127.0.0.1`` from the next, and ``ps``
sees earlier commands' processes. Killing a sandbox (or its timeout, or server shutdown)
kills its init, and the kernel then kills everything left in its PID namespace.

The server protects itself: a command's unread output is held up to a window (8 MiB by
default; past it the command blocks until its client reads, see
:mod:`twinkle.sandbox.processes`), and request values outside the ranges documented in
:mod:`twinkle.sandbox.validation` (timeouts up to 24 h, body sizes) answer 400. A killed
sandbox's files need no deleting: they live in its own tmpfs. The file API resolves nothing on
the host outside a sandbox's own ``/home/user`` and ``/tmp``: other paths, and paths through
symlinks, are handled inside the sandbox as its user (:mod:`twinkle.sandbox.files`). A server
removes at start the folders of dead servers, and with ``parent_pid`` stops when its parent
dies (:mod:`twinkle.sandbox.server`).

Use from Python (tests start it in-process on port 0)::

    from twinkle.sandbox import SandboxServer

    with SandboxServer(port=0, api_key='k', templates=None) as srv:
        srv.url        # 'http://127.0.0.1:41234', for api_url and sandbox_url alike
        srv.env()      # E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY, for os.environ
        sbx = e2b.Sandbox.create(**srv.sdk_kwargs())    # api_url, sandbox_url, api_key
        env = AgentEnv(template='base', api_url=srv.url, api_key='k')

or from the shell: ``twinkle sandbox serve --port 49983 --api-key k [--templates t.yaml]``.

The SDK must be given a sandbox URL equal to the API URL (``sandbox_url=`` or
``E2B_SANDBOX_URL``); otherwise it sends command traffic to E2B's public cloud. ``AgentEnv``
and :meth:`SandboxServer.env` take care of that.

Differences from a microVM: the kernel, the read-only root and the installed software are
the host's (a template's ``root`` may point at another tree; it must provide ``python3`` for
the init); only ``/home/user`` and ``/tmp`` are writable; there is no root user inside.
"""

from twinkle.sandbox.isolation import IsolationError
from twinkle.sandbox.server import SandboxServer
from twinkle.sandbox.templates import BASE_TEMPLATE, Template, TemplateRegistry

__all__ = ["BASE_TEMPLATE", "IsolationError", "SandboxServer", "Template", "TemplateRegistry"]
