"""``twinkle sandbox``: run the local E2B-compatible sandbox server (:mod:`twinkle.sandbox`)."""

from __future__ import annotations

import os
import signal
import sys

import click


@click.group(name="sandbox")
def sandbox() -> None:
    """Run the local E2B-compatible sandbox server."""


@sandbox.command()
@click.option(
    "--port", type=int, default=49983, show_default=True, help="TCP port (0 picks a free one)."
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to bind. The server runs code on request: keep it on loopback.",
)
@click.option("--api-key", default=None, help="Key clients must send (default: $E2B_API_KEY).")
@click.option(
    "--templates",
    "templates_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="YAML or JSON templates file (default: only the built-in 'base').",
)
@click.option("--unisolated", is_flag=True, help="Run commands without bubblewrap (unsafe).")
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory for sandbox files (default: a fresh temporary directory).",
)
@click.option(
    "--output-window-mb",
    type=click.FloatRange(min=0.0625, max=1024),
    default=8,
    show_default=True,
    help="Most unread output held per command; past it the command blocks until read.",
)
@click.option(
    "--parent-pid",
    type=click.IntRange(min=1),
    default=None,
    help="Shut down (cleaning up) once this process is no longer the server's parent.",
)
@click.option(
    "--require-limits",
    is_flag=True,
    help="Refuse to start unless every per-sandbox limit (memory, pids, CPU through cgroups; "
    "disk; network isolation) is enforced on this host.",
)
def serve(
    port: int,
    host: str,
    api_key: str | None,
    templates_file: str | None,
    unisolated: bool,
    root: str | None,
    output_window_mb: float,
    parent_pid: int | None,
    require_limits: bool,
) -> None:
    """Serve E2B's API on HOST:PORT until interrupted; prints the URL once it accepts connections.

    Point the SDK or AgentEnv at it with E2B_API_URL=E2B_SANDBOX_URL=<url> and E2B_API_KEY=<key>.
    """
    from twinkle.sandbox import IsolationError, SandboxServer

    key = api_key or os.environ.get("E2B_API_KEY")
    if not key:
        raise click.UsageError("an API key is required: pass --api-key or set E2B_API_KEY")
    try:
        server = SandboxServer(
            port=port,
            host=host,
            api_key=key,
            templates=templates_file,
            unisolated=unisolated,
            root=root,
            output_window_mb=output_window_mb,
            parent_pid=parent_pid,
            require_limits=require_limits,
        ).start()
    except (IsolationError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    # SIGTERM (systemd, `kill`) must clean up like Ctrl-C: kill every sandbox, delete files.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    mode = "bubblewrap" if server.isolated else "UNISOLATED (unsafe)"
    click.echo(
        f"twinkle sandbox server listening on {server.url} ({mode}); "
        f"templates: {', '.join(sorted(server.templates.templates))}",
        err=True,
    )
    for name, how in server.limits().items():
        click.echo(f"  {name} limit: {how}", err=True)
    click.echo(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
