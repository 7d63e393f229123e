"""``twinkle env``: serve a registered environment over HTTP, and list what is registered.

Example::

    twinkle env list
    twinkle env list --adapter gymnasium --json
    twinkle env show reasoning_gym/leg_counting?size=10&seed=1
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


def _adapter_status(adapter: object) -> tuple[str, bool]:
    """(extra or install hint, installed) of an adapter; built-in ones need nothing."""
    installed = getattr(adapter, "installed", None)
    if installed is None:
        return "-", True
    extra = getattr(adapter, "extra", None)
    hint = f"twinkle[{extra}]" if extra else getattr(adapter, "package", None) or "-"
    return hint, bool(installed())


@env.command("list")
@click.option("--adapter", "only", default=None, help="Only this adapter's environments.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per adapter.")
def list_environments(only: str | None, as_json: bool) -> None:
    """List adapters (with their extra and whether it is installed) and their environments
    as ADAPTER/NAME."""
    from twinkle.core.registry import environment_registry

    try:
        names = [only] if only else environment_registry.list_adapters()
        adapters = [(n, environment_registry.get_adapter(n)) for n in names]
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from exc
    for name, adapter in adapters:
        hint, installed = _adapter_status(adapter)
        envs = adapter.list_environments()
        if as_json:
            record = {"adapter": name, "extra": hint, "installed": installed, "environments": envs}
            click.echo(json.dumps(record))
            continue
        if getattr(adapter, "unavailable", False):
            state = f"unavailable: {str(adapter.conflict).split(':')[0]}"
        else:
            state = "installed" if installed else f"not installed: pip install '{hint}'"
        click.echo(f"{name}  ({hint}, {state})  {len(envs)} environment(s)")
        for env_name in envs:
            click.echo(f"  {name}/{env_name}")


@env.command("show")
@click.argument("spec", metavar="ADAPTER/NAME[?KEY=VALUE&...]")
@click.option("--config", "config", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--index", default=0, show_default=True, help="Task index (or seed) to show.")
def show(spec: str, config: tuple[str, ...], index: int) -> None:
    """Build environment SPEC and print its spec and one sample task."""
    from dataclasses import replace

    from twinkle.core.config import EnvironmentConfig, EnvironmentFactory
    from twinkle.core.state import find_ground_truth
    from twinkle.errors import TwinkleError

    try:
        cfg = EnvironmentConfig.parse(spec)
        cfg = replace(cfg, config={**cfg.config, **_parse_config(config)})
        environment = EnvironmentFactory().build(cfg)
        if environment.spec.supports_task_index:
            state, _ = environment.reset(options={"task_index": index})
        else:
            state, _ = environment.reset(seed=index)
    except (KeyError, TypeError, ValueError, OSError, TwinkleError) as exc:
        raise click.ClickException(str(exc)) from exc
    s = environment.spec
    click.echo(f"{s.adapter}/{s.name}  multi_turn={s.is_multi_turn}  max_steps={s.max_steps}")
    if s.supports_len:
        click.echo(f"tasks: {len(environment)}")
    tools = [t.name for t in environment.available_tools]
    if tools:
        click.echo(f"tools: {', '.join(tools)}")
    for message in state.observation.messages:
        click.echo(f"--- {message['role']}")
        click.echo(str(message.get("content", "")))
    answer = find_ground_truth(state.hidden)
    if answer is not None:
        click.echo(f"--- expected answer\n{answer}")
    close = getattr(environment, "close", None)
    if callable(close):
        close()


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
