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

from twinkle.io import SUFFIXES, DatasetFormatError
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
@click.option(
    "--shard-rows",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Rows per output shard: the unit a --resume run does not redo.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Keep the work folder and reuse the shards and dedup decisions a killed run "
    "finished (a changed input, chain or setting starts afresh).",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for shards, spools and completion markers [default: .OUTPUT.work beside "
    "OUTPUT; removed after success unless --resume].",
)
@click.option(
    "--ray-address",
    default=None,
    metavar="ADDR|auto",
    help="Run the chain on a Ray cluster with Ray Data (same kept rows as without it): "
    "the head's address (host:port, ray://host:10001) or 'auto' for the cluster this "
    "machine belongs to. Workers need twinkle installed (see infra/ray/README.md).",
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
    shard_rows: int,
    resume: bool,
    work_dir: str | None,
    ray_address: str | None,
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

    from twinkle.preprocessor.chain import build_pipeline, parse_filter_names
    from twinkle.preprocessor.stream import curate_stream

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
    try:
        if ray_address:
            from twinkle.preprocessor.ray_backend import curate_ray

            summary = curate_ray(
                files,
                output,
                dropped_path,
                names,
                params=params,
                address=ray_address,
                batch_size=batch_size,
                input_format=input_format,
                work_dir=work_dir,
                resume=resume,
                append=append,
                progress=not quiet,
            )
        else:
            # Streams: memory is the batch and the dedup index, never the input (stream.py).
            summary = curate_stream(
                files,
                output,
                dropped_path,
                stages,
                batch_size=batch_size,
                input_format=input_format,
                shard_rows=shard_rows,
                work_dir=work_dir,
                resume=resume,
                append=append,
                progress=not quiet,
            )
    except DatasetFormatError as exc:
        raise click.ClickException(
            f"{exc}\nNothing was written; fix the input and run again."
        ) from exc
    except OSError as exc:
        raise click.ClickException(
            f"{exc}\nCheck the path and permissions, then run again."
        ) from exc
    stats, written = summary.stats, summary.rows_out
    if summary.shards_reused:
        click.echo(f"resumed: {summary.shards_reused} of {summary.shards} shards were done")

    Console().print(_table(stats, summary.rows_in, written))
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
