"""``twinkle env``: serve a registered environment over HTTP, and list what is registered.

Example::

    twinkle env list
    twinkle env serve-functional math --port 8765
    twinkle env serve-functional code --config timeout=5 --config sandbox_url=http://127.0.0.1:49983
"""

from __future__ import annotations

import json

import click


def _parse_config(pairs: tuple[str, ...]) -> dict[str, object]:
    config: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--config")
        try:
            config[key] = json.loads(raw)  # numbers, booleans, lists; anything else is a string
        except ValueError:
            config[key] = raw
    return config


@click.group()
def env() -> None:
    """Serve and inspect task environments."""


@env.command("list")
def list_environments() -> None:
    """List registered environments as ADAPTER/NAME."""
    from twinkle.core.registry import environment_registry

    for adapter, name in environment_registry.list_environments():
        click.echo(f"{adapter}/{name}")


@env.command("serve-functional")
@click.argument("name")
@click.option(
    "--adapter", default=None, help="Adapter that provides NAME (default: the only one that does)."
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=int, help="0 picks a free port.")
@click.option(
    "--config",
    "config",
    multiple=True,
    metavar="KEY=VALUE",
    help="Environment constructor argument (JSON values allowed); repeatable.",
)
def serve_functional(
    name: str, adapter: str | None, host: str, port: int, config: tuple[str, ...]
) -> None:
    """Serve environment NAME over HTTP for ContainerEnvironment clients."""
    from twinkle.container.server import serve
    from twinkle.core.registry import environment_registry

    try:
        environment = environment_registry.get(name, adapter, **_parse_config(config))
    except (KeyError, TypeError, ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    serve(
        environment,
        host,
        port,
        announce=lambda url: click.echo(f"serving {environment.spec.name} at {url}", nl=True),
    )
