"""Typed parameters of the twinkle flows (pydantic), rendered by the Prefect UI as forms.

One model per flow; every field has bounds and a description, and defaults point at the
bundled ``examples/`` data, so a deployment triggered from the UI with no edits runs the
examples. Secrets are never parameters: an API key is named by the environment variable
that holds it (``api_key_env``), so it stays out of Prefect's database and MLflow; a URL
field refuses credentials written into it (``user:password@``), both here and in the JSON
schema Prefect enforces when it creates a deployment run, so the server turns such a run
down before it stores its parameters.

Example:
    >>> RolloutParams().max_turns, TrackingParams().trace_sample_rate
    (8, 1.0)
    >>> from pydantic import ValidationError
    >>> try:
    ...     RolloutParams(max_turns=0)
    ... except ValidationError as exc:
    ...     print(exc.errors()[0]['loc'])
    ('max_turns',)
    >>> try:
    ...     PolicyParams(base_url='http://me:hunter22@127.0.0.1:8000/v1')
    ... except ValidationError as exc:
    ...     print('hunter22' in str(exc.errors()[0]['msg']), exc.errors()[0]['loc'])
    False ('base_url',)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from twinkle.preflight import CREDENTIALS_IN_URL, check_credentials, has_embedded_credentials
from twinkle.preprocessor.chain import DEFAULT_CHAIN, FILTERS

#: The repository root: bundled examples are found relative to it, whatever the cwd.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = PROJECT_ROOT / "examples"

#: Per-batch steps of the default chain. Its global steps (dedup, neardedup) are left out:
#: the flow puts them first in the chain, switched by ``dedup`` and ``near_dedup``.
DEFAULT_FILTERS = [name for name in DEFAULT_CHAIN if not FILTERS[name][2]]


def _examples(*names: str) -> list[str]:
    return [str(EXAMPLES / n) for n in names]


def _url_without_credentials(what: str, fix: str) -> Any:
    """A ``str`` type that refuses a URL with credentials in it, saying ``fix``; its JSON
    schema carries the same rule as a ``pattern``, which the Prefect server enforces."""

    def check(value: str) -> str:
        problem = check_credentials(value, what, fix)
        if problem:
            raise ValueError(problem)
        return value

    schema = {"type": "string", "pattern": f"^(?!{CREDENTIALS_IN_URL[1:]})"}
    return Annotated[str, AfterValidator(check), WithJsonSchema(schema)]


_PolicyURL = _url_without_credentials(
    "base_url",
    "put the key in an environment variable of the worker, named in policy.api_key_env",
)
_SandboxURL = _url_without_credentials(
    "api_url",
    "put the key in the environment variable named in sandbox.api_key_env",
)
_OpenEnvURL = _url_without_credentials(
    "openenv_base_url", "reach the OpenEnv server on an address without them"
)
_TrackingURI = _url_without_credentials(
    "tracking_uri",
    "give them to the worker as MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD "
    "(a database URI: the driver's own variables, such as PGUSER and PGPASSWORD)",
)
_ArtifactRoot = _url_without_credentials(
    "artifact_location", "give the store's credentials to the worker as environment variables"
)
_RayAddress = _url_without_credentials(
    "ray_address", "reach the Ray cluster on an address without them"
)

#: Said in the description of every URL field.
_NO_CREDENTIALS = " No credentials in it (user:password@): they would be stored with the run."


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _no_credentials_in_any_string(self) -> _Params:
        # The URL fields say what to do instead; this catches URLs inside other values.
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, BaseModel):
                continue
            if any(has_embedded_credentials(text) for text in _strings(value)):
                raise ValueError(
                    f"{name} holds a URL with credentials in it (user:password@), which "
                    "Prefect and MLflow would store with the run: remove them and give the "
                    "key through an environment variable"
                )
        return self


class CurationParams(_Params):
    """Curation: load -> dedup -> quality filters -> PII rewrite -> curated data + dropped log."""

    inputs: list[str] = Field(
        default_factory=lambda: _examples("conversations.jsonl"),
        description="JSONL or Parquet files of conversation rows.",
        min_length=1,
    )
    input_format: Literal["auto", "openai", "sharegpt", "alpaca", "glaive"] = Field(
        "auto",
        description="Row format of the inputs (twinkle.io_formats): OpenAI messages, ShareGPT "
        "conversations, Alpaca instruction/output, raw glaive system/chat; 'auto' detects it "
        "per row.",
    )
    dataset: str = Field(
        "examples",
        description="Dataset name: MLflow tag and output file prefix.",
        pattern=r"^[A-Za-z0-9_.-]+$",
    )
    dedup: bool = Field(
        "dedup" in DEFAULT_CHAIN, description="Drop exact duplicate conversations (DedupFilter)."
    )
    near_dedup: bool = Field(
        "neardedup" in DEFAULT_CHAIN,
        description="Also drop near duplicates (NearDedupFilter, MinHash).",
    )
    filters: list[str] = Field(
        default_factory=lambda: list(DEFAULT_FILTERS),
        description="Curation steps in order, by twinkle.preprocessor.chain name "
        "(model, hard, deadloop, refuse, soup, normalize).",
    )
    shard_size: int = Field(
        2000,
        ge=1,
        le=1_000_000,
        description="Rows per shard of the streamed curation, the unit a killed run "
        "resumes at (with ray_address, Ray Data splits the work itself).",
    )
    pii: Literal["auto", "on", "off"] = Field(
        "auto",
        description="PII rewrite: 'auto' runs it when the pii extra is installed, "
        "'on' requires it.",
    )


class PolicyParams(_Params):
    """The policy model: an OpenAI-compatible endpoint, or replay of the recorded turns."""

    base_url: _PolicyURL | None = Field(
        None,
        description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1. "
        "Empty: replay the recorded assistant turns." + _NO_CREDENTIALS,
    )
    model: str | None = Field(None, description="Model name served at base_url.")
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable holding the API key "
        "(the key itself is never a parameter).",
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="Sampling temperature.")
    max_tokens: int = Field(
        1024, ge=1, le=131072, description="Completion tokens per turn at most."
    )
    request_timeout_s: float = Field(
        120.0, gt=0, description="Bound on one model call, retries included."
    )

    @property
    def replay(self) -> bool:
        return not (self.base_url and self.model)


class SandboxParams(_Params):
    """Sandboxes: one AgentEnv per trajectory against an E2B-compatible server."""

    api_url: _SandboxURL | None = Field(
        None,
        description="E2B-compatible API URL (local sandbox server, AgentENV, E2B). "
        "Empty: start the local sandbox server for the run." + _NO_CREDENTIALS,
    )
    api_key_env: str = Field(
        "E2B_API_KEY", description="Environment variable holding the sandbox API key."
    )
    template: str = Field("base", description="Sandbox template name.")
    sandbox_timeout: int = Field(300, ge=10, le=86400, description="Sandbox lifetime in seconds.")
    tool_timeout_s: float = Field(60.0, gt=0, description="Bound on one tool call.")


class RolloutParams(_Params):
    """Rollout and scoring: sandboxes -> multi-turn rollouts -> rewards -> scored trajectories."""

    conversations: list[str] = Field(
        default_factory=lambda: _examples("conversations.jsonl"),
        description="Recorded agent conversations to re-run against live tools.",
    )
    tasks: list[str] = Field(
        default_factory=lambda: ["math", "multiple_choice", "code"],
        description="Registered task environments to roll out (twinkle.core.registry); "
        "they need a policy model (base_url + model).",
    )
    envs: str | None = Field(
        None,
        description="A YAML file of environments (adapter, name, config, cleaners, judge; see "
        "examples/envs/ in the repository) rolled out beside `tasks`: single-turn entries as "
        "task rows, multi-turn ones (gymnasium, gem, textarena, dialogue) as episodes played "
        "by the policy (config `episodes`, default `tasks_limit` or 1).",
    )
    tasks_limit: int | None = Field(
        None, ge=1, description="Tasks per environment at most (all when empty)."
    )
    openenv: list[str] = Field(
        default_factory=list,
        description="OpenEnv environments to play, by package name (e.g. number_guess); "
        "one environment instance per episode; they need a policy model.",
    )
    openenv_episodes: int = Field(
        4, ge=1, le=100000, description="Episodes per OpenEnv environment."
    )
    openenv_seed: int = Field(
        0,
        ge=0,
        description="Reset seed of each environment's first episode: episode k "
        "is reset with openenv_seed + k, so a rerun replays the "
        "same episodes and another seed draws new ones.",
    )
    openenv_env_kwargs: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Constructor arguments per OpenEnv environment named in openenv, e.g. "
        '{"number_guess": {"low": 1, "high": 1000, "max_attempts": 10}}. In-process only: '
        "an OpenEnv server builds its own environments, so episodes given arguments "
        "there fail with the reason.",
    )
    openenv_base_url: _OpenEnvURL | None = Field(
        None,
        description="OpenEnv server (http://host:port), one WebSocket "
        "session per episode. Empty: run the environments "
        "in-process." + _NO_CREDENTIALS,
    )
    dataset: str = Field(
        "examples",
        description="Dataset name: MLflow tag and output file prefix.",
        pattern=r"^[A-Za-z0-9_.-]+$",
    )
    limit: int | None = Field(
        None, ge=1, description="Conversations re-run at most (all when empty)."
    )
    max_turns: int = Field(8, ge=1, le=256, description="Model calls per trajectory at most.")
    concurrency: int = Field(
        8, ge=1, le=1024, description="Trajectories in flight at once per rollout task."
    )
    shard_size: int = Field(
        64,
        ge=1,
        le=100000,
        description="Trajectories per rollout task under a Ray "
        "task runner (the thread-pool runner runs one task, "
        "one event loop).",
    )
    max_failure_rate: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Share of trajectories that may fail (endpoint errors, environments that "
        "could not be created) before the run ends Failed, its MLflow run FAILED; below it "
        "failures are a warning. 0: any failure fails the run; 1: never.",
    )
    policy: PolicyParams = Field(default_factory=PolicyParams)
    sandbox: SandboxParams = Field(default_factory=SandboxParams)

    @model_validator(mode="after")
    def _env_kwargs_name_played_envs(self) -> RolloutParams:
        # Arguments for an environment that is not played would be silently unused: a typo.
        unknown = sorted(set(self.openenv_env_kwargs) - set(self.openenv))
        if unknown:
            raise ValueError(
                f"openenv_env_kwargs names environments not in openenv: {', '.join(unknown)} "
                f"(openenv: {', '.join(self.openenv) or 'none'})"
            )
        return self


class TrackingParams(_Params):
    """MLflow: where runs and traces go, and how much of each trajectory is traced."""

    tracking_uri: _TrackingURI | None = Field(
        None,
        description="MLflow tracking URI. Empty: mlflow.db (SQLite) in the current directory. "
        "No credentials in it: the worker's MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD hold them.",
    )
    experiment: str = Field("twinkle", description="MLflow experiment name.")
    artifact_location: _ArtifactRoot | None = Field(
        None,
        description="Absolute artifact root for a new experiment. Empty: mlruns/ in the current "
        "directory." + _NO_CREDENTIALS,
    )
    trace_sample_rate: float = Field(
        1.0, ge=0.0, le=1.0, description="Share of trajectories traced."
    )
    max_spans_per_trace: int = Field(64, ge=1, le=10000, description="Spans per trace at most.")
    max_payload_chars: int = Field(
        4000, ge=100, le=1_000_000, description="Characters per span input/output."
    )
    run_key: str | None = Field(
        None,
        description="Identity of the MLflow run; a rerun with the same key "
        "logs into the same run. Empty: the Prefect flow run id.",
    )
    log_dropped_rows: bool = Field(
        False,
        description="Upload the rows curation dropped to MLflow, after the PII rewrite (never "
        "when the PII step did not run). Off: only their counts are logged.",
    )


class RunParams(_Params):
    """Where outputs go, how tasks run, and whether finished stages are reused."""

    output_dir: str = Field(
        "twinkle-out", description="Directory for curated data, trajectories, cached results."
    )
    ray_address: _RayAddress | None = Field(
        None,
        description="Ray cluster address: run tasks with RayTaskRunner." + _NO_CREDENTIALS,
    )
    workers: int = Field(
        4, ge=1, le=256, description="Tasks run at once by the thread-pool task runner."
    )
    refresh_cache: bool = Field(
        False, description="Recompute every stage even when its inputs are unchanged."
    )
