"""``twinkle run``: the main job, the pipeline flow on the bundled examples with embedded services.

Embedded defaults, nothing to set up: Prefect's temporary local API (the flow starts it and
stops it; runs land in ``~/.prefect`` and appear later in ``prefect server start``), MLflow
in ``./mlflow.db`` with artifacts in ``./mlruns`` (absolute paths), the local sandbox
server on a free loopback port with a random API key (started by the flow for its rollout
stage), and the replay policy (the recorded assistant turns) unless ``--base-url`` and
``--model`` name an OpenAI-compatible endpoint. Click for the options; Prefect and MLflow
are imported only when the command runs.

Credentials never become flow parameters (Prefect stores those before any twinkle code
runs): a user and password in an http(s) ``--tracking-uri`` are handed to MLflow as
``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD`` for the run instead, and any
other URL with ``user:password@`` in it is refused with what to do instead.

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
    # With a server as the tracking URI, MLflow writes each run's link to stdout as the run
    # ends: into the progress bar, or into --json's output. The report names the run instead.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "true")
    # Keep the temporary API from rejecting a slow first start on a busy 2-core machine.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


class _NoTracebackForTwinkleErrors(logging.Filter):
    """A failed check or stage raises a ``TwinkleError`` whose message says what to fix; the
    engine's traceback of it would bury that line (the command prints it once, at the end)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from twinkle.errors import TwinkleError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, TwinkleError):
            record.exc_info, record.exc_text = None, None
        return True


class _TaskLinesOffTheTerminal(logging.Filter):
    """Task runs' routine lines ("Finished in state Completed()") stay off the terminal, where
    the summary says it all; they still reach the Prefect run log, and warnings show."""

    def filter(self, record: logging.LogRecord) -> bool:
        routine = record.levelno < logging.WARNING
        return not (routine and record.name.startswith("prefect.task_runs"))


def _quiet() -> None:
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("prefect.flow_runs").addFilter(_NoTracebackForTwinkleErrors())
    logging.getLogger("prefect.task_runs").addFilter(_NoTracebackForTwinkleErrors())
    for handler in logging.getLogger().handlers:  # Prefect's console handler, not its API one
        handler.addFilter(_TaskLinesOffTheTerminal())


@click.command("run")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    type=click.Path(),
    help="Conversation files, folders or globs (JSON/JSONL/Parquet, save_to_disk folders); "
    "default: the bundled examples/conversations.jsonl.",
)
@click.option(
    "--format",
    "input_format",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "openai", "sharegpt", "alpaca", "glaive"]),
    help="Row format of --input: OpenAI messages, ShareGPT conversations, Alpaca "
    "instruction/output, raw glaive system/chat; auto converts each row it recognises.",
)
@click.option(
    "--tasks",
    "tasks",
    multiple=True,
    help="A registered task environment to roll out, by name: math, multiple_choice or code, "
    "or ADAPTER/NAME?KEY=VALUE&... (reasoning_gym/leg_counting?size=50, see `twinkle env "
    "list`); repeat the option for several. Default with a model: the three built-in ones; "
    "they need --base-url/--model.",
)
@click.option(
    "--envs",
    "envs_file",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="A YAML file of environments (adapter, name, config, cleaners, judge; see "
    "examples/envs/) to roll out beside --tasks: single-turn entries as tasks, multi-turn "
    "ones (gymnasium, gem, textarena, dialogue) as episodes the policy plays.",
)
@click.option(
    "--limit",
    default=None,
    type=click.IntRange(1),
    help="Re-run at most this many curated conversations (default: all).",
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
    "--request-timeout",
    default=None,
    type=click.FloatRange(min=0.1),
    help="Seconds one model call may take, retries included, before it fails (default: 120).",
)
@click.option(
    "--sandbox-url",
    default=None,
    help="E2B-compatible sandbox API (default: a local server for the run).",
)
@click.option(
    "--tracking-uri",
    default=None,
    help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db). An MLflow server "
    "(http://host:5000, see infra/mlflow/) takes traces through its OTLP endpoint: the "
    "faster way for large rollouts.",
)
@click.option(
    "--experiment",
    default="twinkle",
    show_default=True,
    help="MLflow experiment the run is logged in (created on first use).",
)
@click.option(
    "--max-turns",
    default=8,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Model calls per trajectory at most; a trajectory still calling tools then stops "
    "with stop reason max_turns.",
)
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=click.IntRange(1, 1024),
    help="Trajectories rolled out at once (each with its own sandbox and model calls).",
)
@click.option(
    "--trace-sample-rate",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Share of trajectories traced in MLflow (0.1: one in ten; the same ones on a rerun).",
)
@click.option(
    "--max-failure-rate",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Share of trajectories that may fail before the run fails (exit status 1).",
)
@click.option(
    "--log-dropped-rows",
    is_flag=True,
    help="Upload the rows curation dropped to the MLflow run, after the PII rewrite (never "
    "when the PII step did not run). Default: only their counts; the full log stays in "
    "<output>/<run>/curated/.",
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
    input_format,
    tasks,
    envs_file,
    limit,
    output,
    base_url,
    model,
    api_key_env,
    request_timeout,
    sandbox_url,
    tracking_uri,
    experiment,
    max_turns,
    concurrency,
    trace_sample_rate,
    max_failure_rate,
    log_dropped_rows,
    ray_address,
    fresh,
    as_json,
) -> None:
    """Run the whole pipeline (curate, roll out in sandboxes, score, trace in MLflow).

    Exits 1 when the run fails (more trajectories failed than --max-failure-rate allows,
    an endpoint is down, a stage raised), naming what failed; its MLflow run is FAILED.
    """
    if bool(base_url) != bool(model):
        raise click.UsageError(
            "--base-url and --model go together (or give neither to replay recordings)"
        )
    if envs_file:
        from twinkle.core.config import env_file_tasks

        try:  # one "@file#key" task per entry, so --tasks-limit-style caps apply per env
            tasks = (*tasks, *env_file_tasks(envs_file))
        except (OSError, ValueError, TypeError) as exc:
            raise click.BadParameter(str(exc), param_hint="--envs") from exc
    if tasks and not base_url:
        raise click.UsageError("--tasks need a policy model: give --base-url and --model")
    started = time.perf_counter()
    cwd = Path.cwd().resolve()
    uri = tracking_uri or f"sqlite:///{cwd / 'mlflow.db'}"
    uri, tracking_env = _check_before_start(inputs, base_url, sandbox_url, ray_address, uri)
    from twinkle.preflight import has_embedded_credentials

    if any(has_embedded_credentials(t) for t in tasks):
        raise click.BadParameter(
            "a task holds a URL with credentials in it (user:password@), which Prefect and "
            "MLflow would store with the run: remove them and give the key through an "
            "environment variable",
            param_hint="--tasks/--envs",
        )
    _environment()
    say = (lambda *a, **k: None) if as_json else click.echo
    say("twinkle run: starting Prefect's temporary API and the pipeline flow ...")

    # Prefect and pydantic load here, not at `twinkle --help`.
    from flows.lifecycle import temporary_api_settings
    from flows.params import (
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
    curation = CurationParams(
        input_format=input_format,
        **({"inputs": [str(Path(p).resolve()) for p in inputs]} if inputs else {}),
    )
    # Named tasks; with a model but no names, every bundled task environment; without a model, none.
    task_kw = {"tasks": list(tasks)} if tasks else ({} if base_url else {"tasks": []})
    rollout = RolloutParams(
        **task_kw,
        limit=limit,
        max_turns=max_turns,
        concurrency=concurrency,
        max_failure_rate=max_failure_rate,
        policy=PolicyParams(
            base_url=base_url,
            model=model,
            api_key_env=api_key_env,
            **({"request_timeout_s": request_timeout} if request_timeout else {}),
        ),
        sandbox=SandboxParams(api_url=sandbox_url),
    )
    tracking = TrackingParams(
        tracking_uri=uri,
        experiment=experiment,
        trace_sample_rate=trace_sample_rate,
        log_dropped_rows=log_dropped_rows,
    )
    runp = RunParams(
        output_dir=str(Path(output).resolve()), ray_address=ray_address, refresh_cache=fresh
    )
    from twinkle.errors import TwinkleError

    try:
        with (
            _environ(tracking_env),
            temporary_api_settings(),
            _interrupts_as_keyboard(),
            _progress_bar(enabled=not as_json) as progress,
        ):
            summary = pipeline_flow(
                curation=curation, rollout=rollout, tracking=tracking, run=runp, progress=progress
            )
    except TwinkleError as exc:  # a failed stage or check: its message says what and why
        raise click.ClickException(f"the run failed: {exc}") from exc
    except KeyboardInterrupt:
        click.echo("twinkle run: interrupted; the MLflow run is marked KILLED", err=True)
        sys.exit(130)
    except Exception as exc:
        raise click.ClickException(f"the pipeline failed: {type(exc).__name__}: {exc}") from exc
    summary["wall_s"] = round(time.perf_counter() - started, 2)
    if as_json:
        click.echo(json.dumps(_rounded(summary), default=str))
        return
    _report(summary, uri)


def _rounded(value: Any, digits: int = 4) -> Any:
    """Floats rounded for people (``0.9655172413793104`` -> ``0.9655``), containers walked."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v, digits) for v in value]
    return value


def _check_before_start(
    inputs: tuple[str, ...],
    base_url: str | None,
    sandbox_url: str | None,
    ray_address: str | None,
    uri: str,
) -> tuple[str, dict[str, str]]:
    """Inputs, URLs and the tracking URI checked before Prefect starts: a usage error with
    one line per problem, in well under a second. Returns the tracking URI without
    credentials, and the MLflow variables that carry them for the run."""
    from twinkle.preflight import check_credentials, check_inputs, check_tracking_uri, check_url

    uri, tracking_env, problem = _tracking_credentials(uri)
    problems = check_inputs(inputs)
    problems += [
        p
        for p in (
            check_url(base_url, "--base-url"),
            check_credentials(
                base_url,
                "--base-url",
                "export the key in a variable named by --api-key-env (sent as a Bearer token)",
            ),
            check_url(sandbox_url, "--sandbox-url"),
            check_credentials(
                sandbox_url, "--sandbox-url", "export the key as E2B_API_KEY (X-API-Key header)"
            ),
            check_credentials(
                ray_address, "--ray-address", "reach the cluster on an address without them"
            ),
            problem,
            None if problem else check_tracking_uri(uri),
        )
        if p
    ]
    if problems:
        raise click.UsageError("\n".join(problems))
    return uri, tracking_env


def _tracking_credentials(uri: str) -> tuple[str, dict[str, str], str | None]:
    """``(uri without credentials, MLflow's variables for them, problem)``: a user and
    password in an http(s) tracking URI move to ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``
    (MLflow's documented basic auth), so they never become a flow parameter; credentials
    that cannot move (a token alone, a database URI, a variable already set otherwise) are
    a problem saying what to do."""
    from twinkle.preflight import check_credentials, split_credentials

    clean, user, password = split_credentials(uri)
    if clean == uri:
        return uri, {}, None
    if not uri.startswith(("http://", "https://")):
        fix = "give them through the database driver's variables (PGUSER, PGPASSWORD, ...)"
        return uri, {}, check_credentials(uri, "--tracking-uri", fix)
    if not (user and password):
        fix = "export the token as MLFLOW_TRACKING_TOKEN"
        return uri, {}, check_credentials(uri, "--tracking-uri", fix)
    env = {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}
    clash = [k for k, v in env.items() if os.environ.get(k, v) != v]
    if clash:
        fix = f"{' and '.join(clash)} already hold other values: keep one of the two"
        return uri, {}, check_credentials(uri, "--tracking-uri", fix)
    return clean, env, None


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block (MLflow reads its credentials there, and a
    helper process started in the block inherits them), restored after."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _interrupts_as_keyboard() -> Iterator[None]:
    """SIGTERM (a terminal closed, ``kill``) interrupts like Ctrl-C, so the flow's guard ends
    the MLflow run KILLED instead of leaving it RUNNING. Both also cancel the rollouts in
    flight (``twinkle.rollout.runner.stop_all``): they run in a worker thread, which the
    process would otherwise wait for, the whole rollout long, before it could exit."""
    import signal
    import threading

    from twinkle.rollout.runner import stop_all

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        stop_all()
        raise KeyboardInterrupt(f"signal {signum}")

    before = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _progress_bar(enabled: bool) -> Iterator[Any]:
    """A ``rich`` bar on stderr; yields the ``callable(stage, done, total)`` the flow calls
    with its stage progress (None when disabled)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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

        yield show


def _review_mlflow(uri: str, s: dict) -> list[str]:
    """Where the MLflow run is: the run's page on a server, else how to serve the store."""
    if uri.startswith(("http://", "https://")):  # credentials were moved out before the run
        from flows.lifecycle import mlflow_run_url

        page = mlflow_run_url(uri, s["experiment_id"], s["mlflow_run_id"])
        return [f"  {page}   # runs, metrics, plots, traces"]
    return [
        "  MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow server --workers 1 --port 5000 "
        f"--backend-store-uri {uri}   # runs, metrics, plots, traces"
    ]


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
        *([f"  warning       {s['warning']}"] if s.get("warning") else []),
        f"  stop reasons  {stops}",
        f"  mean reward   {mean_text}   pass rate {rate_text}",
        f"  traces        {s['traces_written']} written to MLflow (run {s['mlflow_run_id']})",
        *[f"  skipped       {k}: {v}" for k, v in s.get("skipped", {}).items()],
        f"  reused        {', '.join(s['reused']) or 'nothing'} (from the cache; --fresh "
        "recomputes)"
        if s.get("reused")
        else "  reused        nothing (every stage ran)",
        f"  outputs       {s['curated_path']}",
        f"                {s['dropped_path']}",
        f"                {s['scored_path']}",
        f"  wall time     {s['wall_s']:.1f} s",
        "",
        "Review it",
        *_review_mlflow(uri, s),
        "  prefect server start                                   "
        "# flow runs, task states, artifacts",
    ]
    click.echo("\n".join(lines))
    sys.stdout.flush()
