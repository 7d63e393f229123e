"""Credentials written into a URL never reach Prefect's database: the flow parameter models
refuse them, the Prefect server refuses a deployment run carrying them before it stores its
parameters (the models' JSON schema), and ``twinkle run`` refuses them before it starts a flow.
The password is searched for, byte by byte, in the Prefect database afterwards (the run that
moves a tracking URI's password out of the URL is in test_flows_mlflow_server.py)."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from tests.flows.tests_flows_helpers import files_holding, prefect_db_files

pytestmark = pytest.mark.slow


def _password() -> str:
    return f"Pw{uuid.uuid4().hex[:12]}"


def test_the_parameter_models_refuse_credentials_in_every_url_field():
    from flows.params import PolicyParams, RolloutParams, RunParams, SandboxParams, TrackingParams

    secret = _password()
    url = f"http://twinkle:{secret}@127.0.0.1:9/v1"
    for model, field, hint in (
        (PolicyParams, "base_url", "api_key_env"),
        (SandboxParams, "api_url", "api_key_env"),
        (RolloutParams, "openenv_base_url", "without them"),
        (TrackingParams, "tracking_uri", "MLFLOW_TRACKING_PASSWORD"),
        (TrackingParams, "artifact_location", "environment variables"),
        (RunParams, "ray_address", "without them"),
    ):
        with pytest.raises(ValidationError) as caught:
            model(**{field: url})
        [error] = caught.value.errors()
        assert error["loc"] == (field,)
        assert "carries credentials" in error["msg"] and hint in error["msg"]
        assert secret not in error["msg"]
    # A token alone is a credential too; an @ after the host is not.
    with pytest.raises(ValidationError):
        PolicyParams(base_url=f"https://{secret}@api.example.org/v1")
    assert PolicyParams(base_url="http://127.0.0.1:8000/v1?tag=a@b").base_url.endswith("a@b")
    assert TrackingParams(tracking_uri="sqlite:////tmp/a@b/mlflow.db").tracking_uri
    # A URL inside another value: a task's settings, an environment's arguments.
    for kwargs, field in (
        ({"tasks": [f"code?sandbox_url=http://u:{secret}@127.0.0.1:9"]}, "tasks"),
        (
            {"openenv": ["x"], "openenv_env_kwargs": {"x": {"url": f"https://{secret}@h"}}},
            "openenv_env_kwargs",
        ),
    ):
        with pytest.raises(ValidationError) as caught:
            RolloutParams(**kwargs)
        message = caught.value.errors()[0]["msg"]
        assert f"{field} holds a URL with credentials" in message and secret not in message
    assert RolloutParams(tasks=["reasoning_gym/leg_counting?size=50"]).tasks


def test_a_flow_run_given_a_password_fails_validation_without_echoing_it(prefect_api):
    from prefect.exceptions import ParameterTypeError

    from flows.pipeline import pipeline_flow

    secret = _password()
    with pytest.raises(ParameterTypeError) as caught:
        pipeline_flow.validate_parameters(
            {"rollout": {"policy": {"base_url": f"http://u:{secret}@127.0.0.1:9/v1"}}}
        )
    message = str(caught.value)
    assert "rollout.policy.base_url" in message and "carries credentials" in message
    assert secret not in message


def test_the_prefect_server_refuses_a_deployment_run_with_a_password_before_storing_it(
    prefect_api,
):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.utilities.callables import parameter_schema

    from flows.pipeline import pipeline_flow

    secret = _password()
    url = f"http://twinkle:{secret}@127.0.0.1:9/v1"
    schema = parameter_schema(pipeline_flow).model_dump_for_openapi()
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name(pipeline_flow.name)
        deployment_id = client.create_deployment(
            flow_id=flow_id,
            name=f"url-credentials-{uuid.uuid4().hex[:6]}",
            parameter_openapi_schema=schema,
            enforce_parameter_schema=True,
        )
        # The form's own rule: the same URL without credentials is accepted.
        ok = client.create_flow_run_from_deployment(
            deployment_id,
            parameters={"rollout": {"policy": {"base_url": "http://127.0.0.1:9/v1"}}},
        )
        client.delete_flow_run(ok.id)
        with pytest.raises(PrefectHTTPStatusError) as caught:
            client.create_flow_run_from_deployment(
                deployment_id,
                parameters={"rollout": {"policy": {"base_url": url, "model": "m"}}},
            )
    assert caught.value.response.status_code == 409
    assert "rollout.policy.base_url" in caught.value.response.text
    assert files_holding(secret, *prefect_db_files()) == []


def test_twinkle_run_refuses_a_password_in_a_url_before_prefect_sees_it(prefect_api, tmp_path):
    from twinkle.cli import main

    secret = _password()
    for option, value, hint in (
        ("--base-url", f"http://u:{secret}@127.0.0.1:9/v1", "--api-key-env"),
        ("--sandbox-url", f"http://u:{secret}@127.0.0.1:9", "E2B_API_KEY"),
        ("--tracking-uri", f"postgresql://u:{secret}@127.0.0.1:9/mlflow", "PGPASSWORD"),
        ("--tracking-uri", f"http://{secret}@127.0.0.1:9", "MLFLOW_TRACKING_TOKEN"),
    ):
        extra = ["--model", "m"] if option == "--base-url" else []
        result = CliRunner().invoke(
            main, ["run", option, value, *extra, "--output", str(tmp_path / "out")]
        )
        assert result.exit_code == 2, result.output
        assert f"{option} '" in result.output and "carries credentials" in result.output
        assert hint in " ".join(result.output.split())
        assert secret not in result.output
    result = CliRunner().invoke(
        main,
        [
            "run",
            *("--base-url", "http://127.0.0.1:9/v1", "--model", "m"),
            *("--tasks", f"code?sandbox_url=http://u:{secret}@127.0.0.1:9"),
            *("--output", str(tmp_path / "out")),
        ],
    )
    assert result.exit_code == 2 and "a task holds a URL with credentials" in result.output
    assert secret not in result.output
    assert files_holding(secret, *prefect_db_files(), tmp_path) == []
