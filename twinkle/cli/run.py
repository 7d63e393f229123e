"""``twinkle run``: the main job, the pipeline flow on the bundled examples with embedded services.

Embedded defaults, nothing to set up: Prefect's temporary local API (the flow starts it and
stops it; runs land in ``~/.prefect`` and appear later in ``prefect server start``), MLflow
in ``./mlflow.db`` with artifacts in ``./mlruns`` (absolute paths), the local sandbox
server on a free loopback port with a random API key (started by the flow for its rollout
stage), and the replay policy (the recorded assistant turns) unless ``--base-url`` and
``--model`` name an OpenAI-compatible endpoint. Click for the options; Prefect and MLflow
are imported only when the command runs.

Example::

    twinkle run
    twinkle run --base-url http://127.0.0.1:8000/v1 --model qwen3-8b --api-key-env VLLM_KEY
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

_QUIET_LOGGERS = (
    "prefect.task_runs",
    "prefect.task_engine",
    "presidio-analyzer",
    "mlflow",
    "alembic",
    "httpx",
    "uvicorn",
    "uvicorn.access",
    "uvicorn.error",
    "twinkle.sandbox",
)


def _environment() -> None:
    """Settings the embedded services read at import: set them before Prefect is imported."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    # MLflow sets its loggers' level from this when imported (a level set earlier is undone):
    # without it, "Creating initial MLflow database tables..." lands in the middle of the bar.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "true")
    # Keep the temporary API from rejecting a slow first start on a busy 2-core machine.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


def _quiet() -> None:
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


@click.command("run")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Conversation files (JSONL/Parquet); default: the bundled examples/conversations.jsonl.",
)
@click.option(
    "--tasks",
    "tasks",
    multiple=True,
    help="Task environments to roll out (math, multiple_choice, code; all of them when a model "
    "is given and none is named); need --base-url/--model.",
)
@click.option(
    "--output",
    "output",
    default="twinkle-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Output directory (curated data, trajectories, cached stage results).",
)
@click.option(
    "--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."
)
@click.option("--model", default=None, help="Model name at --base-url.")
@click.option(
    "--api-key-env", default=None, help="Environment variable holding the endpoint's API key."
)
@click.option(
    "--sandbox-url",
    default=None,
    help="E2B-compatible sandbox API (default: a local server for the run).",
)
@click.option(
    "--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db)."
)
@click.option("--max-turns", default=8, show_default=True, type=click.IntRange(1, 256))
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1, 1024))
@click.option(
    "--trace-sample-rate", default=1.0, show_default=True, type=click.FloatRange(0.0, 1.0)
)
@click.option(
    "--ray-address",
    default=None,
    help="Run tasks on a Ray cluster (needs a Prefect server, see infra/).",
)
@click.option(
    "--fresh", is_flag=True, help="Recompute every stage instead of reusing finished ones."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON only.")
def run(
    inputs,
    tasks,
    output,
    base_url,
    model,
    api_key_env,
    sandbox_url,
    tracking_uri,
    max_turns,
    concurrency,
    trace_sample_rate,
    ray_address,
    fresh,
    as_json,
) -> None:
    """Run the whole pipeline (curate, roll out in sandboxes, score, trace in MLflow)."""
    if bool(base_url) != bool(model):
        raise click.UsageError(
            "--base-url and --model go together (or give neither to replay recordings)"
        )
    if tasks and not base_url:
        raise click.UsageError("--tasks need a policy model: give --base-url and --model")
    started = time.perf_counter()
    _environment()
    say = (lambda *a, **k: None) if as_json else click.echo
    say("twinkle run: starting Prefect's temporary API and the pipeline flow ...")

    from flows.params import (  # Prefect and pydantic load here, not at `twinkle --help`
        CurationParams,
        PolicyParams,
        RolloutParams,
        RunParams,
        SandboxParams,
        TrackingParams,
    )
    from flows.pipeline import pipeline_flow

    if ray_address:
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():  # else every Ray worker would start its own temporary API
            raise click.UsageError(
                "--ray-address needs a Prefect server that the Ray workers can reach: start one "
                "(infra/prefect/start-server.sh) and export PREFECT_API_URL=http://<host>:4200/api"
            )
    _quiet()
    cwd = Path.cwd().resolve()
    uri = tracking_uri or f"sqlite:///{cwd / 'mlflow.db'}"
    curation = CurationParams(
        **({"inputs": [str(Path(p).resolve()) for p in inputs]} if inputs else {})
    )
    # Named tasks; with a model but no names, every bundled task environment; without a model, none.
    task_kw = {"tasks": list(tasks)} if tasks else ({} if base_url else {"tasks": []})
    rollout = RolloutParams(
        **task_kw,
        max_turns=max_turns,
        concurrency=concurrency,
        policy=PolicyParams(base_url=base_url, model=model, api_key_env=api_key_env),
        sandbox=SandboxParams(api_url=sandbox_url),
    )
    tracking = TrackingParams(tracking_uri=uri, trace_sample_rate=trace_sample_rate)
    runp = RunParams(
        output_dir=str(Path(output).resolve()), ray_address=ray_address, refresh_cache=fresh
    )
    try:
        with _progress_bar(enabled=not as_json):
            summary = pipeline_flow(curation=curation, rollout=rollout, tracking=tracking, run=runp)
    except Exception as exc:
        raise click.ClickException(f"the pipeline failed: {type(exc).__name__}: {exc}") from exc
    summary["wall_s"] = round(time.perf_counter() - started, 2)
    if as_json:
        click.echo(json.dumps(summary, default=str))
        return
    _report(summary, uri)


@contextlib.contextmanager
def _progress_bar(enabled: bool) -> Iterator[None]:
    """A ``rich`` bar on stderr fed by the flow's stage progress (``flows.progress``)."""
    if not enabled:
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from flows.progress import StageProgress

    bars: dict[str, Any] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as progress:

        def show(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = progress.add_task(f"  {stage}", total=total)
            progress.update(bars[stage], completed=done, total=total)

        StageProgress.listeners.append(show)
        try:
            yield
        finally:
            StageProgress.listeners.remove(show)


def _report(s: dict, uri: str) -> None:
    drops = (
        ", ".join(f"{k}={v}" for k, v in sorted(s.get("drops", {}).items(), key=lambda kv: -kv[1]))
        or "none"
    )
    stops = ", ".join(f"{k}={v}" for k, v in sorted(s.get("stop_reasons", {}).items())) or "none"
    mean, rate = s.get("reward_mean"), s.get("pass_rate")
    mean_text = "n/a" if mean is None else f"{mean:.3f}"
    rate_text = "n/a" if rate is None else f"{rate:.2f}"
    lines = [
        "",
        "What happened",
        f"  curation      {s['rows_in']} rows in -> {s['rows_out']} rows out "
        f"({s['dropped']} dropped: {drops})",
        f"  PII step      {s['pii']}",
        f"  rollout       {s['trajectories']} trajectories with policy {s['policy']}, "
        f"{s['failed']} failed",
        f"  stop reasons  {stops}",
        f"  mean reward   {mean_text}   pass rate {rate_text}",
        f"  traces        {s['traces_written']} written to MLflow (run {s['mlflow_run_id']})",
        *[f"  skipped       {k}: {v}" for k, v in s.get("skipped", {}).items()],
        f"  outputs       {s['curated_path']}",
        f"                {s['dropped_path']}",
        f"                {s['scored_path']}",
        f"  wall time     {s['wall_s']} s",
        "",
        "Review it",
        f"  mlflow ui --backend-store-uri {uri} --port 5000      # runs, metrics, plots, traces",
        "  prefect server start                                   "
        "# flow runs, task states, artifacts",
    ]
    click.echo("\n".join(lines))
    sys.stdout.flush()
