"""``twinkle curate``: deduplicate and filter conversation datasets from the command line.

click for the command, rich for the progress bar and the closing table (both core
dependencies). The chain itself comes from ``twinkle.preprocessor.chain``, the same code
the Prefect flow runs.

Example::

    twinkle curate examples/ -o curated.jsonl --dropped dropped.jsonl
    twinkle curate a.parquet b.jsonl -o out.parquet --filters dedup,hard,normalize
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from twinkle.io import SUFFIXES, DatasetFormatError, count_rows, read_rows, write_rows
from twinkle.io_formats import FORMATS
from twinkle.preprocessor.chain import DEFAULT_CHAIN

_DEFAULT = ",".join(DEFAULT_CHAIN)


def _expand(inputs: tuple[str, ...]) -> list[Path]:
    """Files and ``save_to_disk`` folders of INPUTS (folders: their own data files; globs)."""
    from twinkle.io_formats import expand_sources

    missing = [i for i in inputs if not Path(i).exists() and not set("*?[") & set(i)]
    if missing:
        raise click.UsageError(f"input {missing[0]!r} does not exist")
    try:
        # Only a folder's own files: sub-folders often hold other data (task sets).
        return expand_sources(inputs)
    except (ValueError, FileNotFoundError) as exc:
        raise click.UsageError(str(exc)) from exc


def _table(stats: Any, rows_read: int, rows_written: int) -> Any:
    from rich.table import Table

    table = Table(title="twinkle curate", show_lines=False)
    table.add_column("step")
    table.add_column("rows in", justify="right")
    table.add_column("rows out", justify="right")
    table.add_column("dropped", justify="right")
    table.add_column("drops by reason")
    for s in stats.steps.values():
        reasons = ", ".join(
            f"{r}: {n}" for r, n in sorted(s.dropped.items(), key=lambda kv: -kv[1])
        )
        table.add_row(
            s.step, str(s.rows_in), str(s.rows_out), str(sum(s.dropped.values())), reasons or "-"
        )
    table.add_section()
    table.add_row("total", str(rows_read), str(rows_written), str(rows_read - rows_written), "")
    return table


@click.command("curate")
@click.argument("inputs", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Curated rows: .jsonl, .json or .parquet.",
)
@click.option(
    "--dropped",
    "dropped_path",
    type=click.Path(dir_okay=False),
    default="",
    help="Write every dropped row here as JSONL {step, reason, row} (replacing what the "
    "file held, unless --append).",
)
@click.option(
    "--append",
    is_flag=True,
    help="Add to the --dropped log instead of replacing it (a rerun then logs its drops twice).",
)
@click.option(
    "--overwrite-dropped",
    is_flag=True,
    hidden=True,
    help="The default now; kept so older scripts still run.",
)
@click.option(
    "--filters",
    default=_DEFAULT,
    show_default=True,
    help="Comma-separated steps, run in this order: dedup, neardedup, model, hard, "
    "deadloop, refuse, soup, normalize, pii (PII rewrite; needs the `pii` extra), sanity "
    "(MessageSanityFilter), intent (IntentClassifier: tags rows, counts printed).",
)
@click.option(
    "--allowed-model",
    "allowed_models",
    multiple=True,
    help="For the 'model' step: an allowed model id or glob (repeatable). "
    "Without it the default large-model families apply.",
)
@click.option(
    "--near-threshold",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=None,
    help="For the 'neardedup' step: Jaccard similarity at which rows are near duplicates.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Rows per batch for the per-batch filters.",
)
@click.option(
    "--format",
    "input_format",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="Row format of the inputs: OpenAI messages, ShareGPT conversations, Alpaca "
    "instruction/output or raw glaive system/chat; 'auto' detects it per row and names the "
    "first row in no known format.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def curate(
    inputs: tuple[str, ...],
    output: str,
    dropped_path: str,
    append: bool,
    overwrite_dropped: bool,
    filters: str,
    allowed_models: tuple[str, ...],
    near_threshold: float | None,
    batch_size: int,
    input_format: str,
    quiet: bool,
) -> None:
    """Deduplicate and filter conversation datasets (JSONL, JSON or Parquet files or folders).

    A folder stands for the data files directly inside it (sub-folders are not read); a
    Hugging Face ``save_to_disk`` folder and a quoted glob ('data/*.jsonl') are read too.
    OpenAI, ShareGPT and Alpaca rows are accepted (see --format).

    Reads every INPUT, runs the filter chain, writes the surviving rows to OUTPUT and
    prints rows in, rows out and drops per step and reason.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from twinkle.preprocessor.chain import build_pipeline, curate_rows, parse_filter_names
    from twinkle.preprocessor.quality import truncate_dropped_logs

    if Path(output).suffix.lower() not in SUFFIXES:
        raise click.BadParameter(
            f"{output!r} must end in one of {', '.join(SUFFIXES)}", param_hint="-o/--output"
        )
    try:
        names = parse_filter_names(filters)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--filters") from exc
    params: dict[str, dict[str, Any]] = {}
    if allowed_models:
        if "model" not in names:
            raise click.UsageError("--allowed-model needs the 'model' step: add it to --filters")
        params["model"] = {"allowed_models": list(allowed_models)}
    if near_threshold is not None:
        if "neardedup" not in names:
            raise click.UsageError(
                "--near-threshold needs the 'neardedup' step: add it to --filters"
            )
        params["neardedup"] = {"threshold": near_threshold}
    try:
        stages = build_pipeline(names, params)
    except ImportError as exc:
        raise click.ClickException(
            f"a filter of --filters cannot be loaded ({exc}); "
            "leave it out of --filters or reinstall twinkle"
        ) from exc
    except (TypeError, ValueError) as exc:  # a step that needs settings the CLI cannot give
        raise click.BadParameter(str(exc), param_hint="--filters") from exc

    files = _expand(inputs)
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
        transient=False,
    )
    tasks: dict[str, Any] = {}

    def advance(label: str, done: int, total: int) -> None:
        if label not in tasks:
            tasks[label] = progress.add_task(label, total=total)
        progress.advance(tasks[label], done)

    try:
        with progress:
            total = count_rows(files)
            read_task = progress.add_task("read", total=total)
            rows = []
            for row in read_rows(files, input_format):
                rows.append(row)
                if len(rows) % 10000 == 0:
                    progress.update(read_task, completed=len(rows))
            progress.update(read_task, completed=len(rows))
            if dropped_path and not append:
                truncate_dropped_logs(dropped_path)
            kept, stats = curate_rows(
                rows, stages, dropped_log_path=dropped_path, batch_size=batch_size, on_batch=advance
            )
            write_task = progress.add_task("write", total=len(kept))
            written = write_rows(output, kept)
            progress.update(write_task, completed=written)
    except DatasetFormatError as exc:
        raise click.ClickException(
            f"{exc}\nNothing was written; fix the input and run again."
        ) from exc
    except OSError as exc:
        raise click.ClickException(
            f"{exc}\nCheck the path and permissions, then run again."
        ) from exc

    Console().print(_table(stats, len(rows), written))
    for step, tags in stats.tags().items():  # IntentClassifier: rows per intent
        counts = ", ".join(f"{t}: {n}" for t, n in sorted(tags.items(), key=lambda kv: -kv[1]))
        click.echo(f"{step} tags: {counts}")
    click.echo(
        f"wrote {written} rows to {output}"
        + (
            f"; dropped rows {'appended' if append else 'written'} to {dropped_path}"
            if dropped_path
            else "; pass --dropped PATH to keep the dropped rows"
        )
    )
