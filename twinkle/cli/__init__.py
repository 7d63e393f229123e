"""The ``twinkle`` command.

Each sub-command lives in its own module and is imported only when it runs, so
``twinkle --help`` stays fast and a missing optional extra only affects its own command.

Example::

    twinkle run                       # the main job on the bundled examples
    twinkle curate data.jsonl -o curated.jsonl --dropped dropped.jsonl
    twinkle sandbox serve --port 49983
"""

from __future__ import annotations

import importlib

import click

from twinkle.errors import MissingExtraError

# name -> (module, attribute, one-line help); modules are imported lazily.
_COMMANDS = {
    "run": ("twinkle.cli.run", "run", "Run the whole pipeline (curate, roll out, score, track)."),
    "curate": ("twinkle.cli.curate", "curate", "Deduplicate and filter conversation datasets."),
    "sandbox": ("twinkle.cli.sandbox", "sandbox", "Run the local E2B-compatible sandbox server."),
    "env": ("twinkle.cli.env", "env", "Serve and inspect task environments."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _COMMANDS:
            return None
        module, attr, _ = _COMMANDS[name]
        try:
            return getattr(importlib.import_module(module), attr)
        except MissingExtraError as exc:
            # A command that requires its extra on import: the error already names the pip line.
            raise click.ClickException(f"'twinkle {name}': {exc}") from exc
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("twinkle"):
                raise click.ClickException(
                    f"'twinkle {name}' is not available in this build ({exc})."
                ) from exc
            # The command modules import only core dependencies, whose pip name is the module's.
            missing = MissingExtraError(f"'twinkle {name}'", package=exc.name)
            raise click.ClickException(f"{missing} (see README, 'Installation').") from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, _COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="twinkle")
def main() -> None:
    """Twinkle: prepare agentic RL data with Prefect flows and MLflow tracking."""
