"""twinkle.errors: one exception family, and one "missing extra" error naming the pip line."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys

import click
import pytest

import twinkle
from twinkle.errors import (
    EnvError,
    MissingExtraError,
    ProtocolError,
    SandboxError,
    TwinkleError,
    require,
)

#: Exception classes left on their stdlib base, each with the reason.
NOT_REBASED = {
    # Owned by the PII work stream; a private control-flow signal that never leaves the module.
    "twinkle.preprocessor.pii.filter._RowFailed": "module owned by the PII work stream",
}


def _twinkle_exceptions() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(twinkle.__path__, "twinkle."):
        if info.name == "twinkle.__main__":  # runs the CLI on import
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [cls for name, cls in sorted(found.items()) if name not in NOT_REBASED]


def test_every_twinkle_exception_is_a_twinkle_error():
    classes = _twinkle_exceptions()
    assert len(classes) >= 15  # the walk found the package's exceptions, not an empty list
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, TwinkleError)
    ]
    assert outside == []


@pytest.mark.parametrize(
    ("path", "family", "stdlib"),
    [
        ("twinkle.errors.MissingExtraError", TwinkleError, ImportError),
        ("twinkle.errors.TrackingError", TwinkleError, RuntimeError),
        ("twinkle.io.DatasetFormatError", TwinkleError, ValueError),
        ("twinkle.protocol.base.APICallError", ProtocolError, RuntimeError),
        ("twinkle.sandbox.envd.RpcError", SandboxError, Exception),
        ("twinkle.sandbox.files.ThroughSymlink", SandboxError, Exception),
        ("twinkle.sandbox.files.OutsideSandbox", SandboxError, Exception),
        ("twinkle.sandbox.processes.InitError", SandboxError, OSError),
        ("twinkle.sandbox.isolation.IsolationError", SandboxError, RuntimeError),
        ("twinkle.sandbox.sandbox.SetupError", SandboxError, RuntimeError),
        ("twinkle.container.client.ContainerEnvironmentError", EnvError, RuntimeError),
    ],
)
def test_each_error_has_its_family_and_keeps_its_stdlib_base(path, family, stdlib):
    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, family) and issubclass(cls, stdlib)


def test_init_error_still_behaves_as_an_os_error():
    from twinkle.sandbox.processes import InitError

    err = InitError(32, "init is gone")
    assert (err.errno, err.strerror) == (32, "init is gone")


def test_missing_extra_error_names_the_pip_line():
    extra = MissingExtraError("EnvPool", "ray", module="ray")
    assert extra.install == "pip install 'twinkle[ray]'" and extra.install in str(extra)
    assert (extra.feature, extra.extra, extra.name) == ("EnvPool", "ray", "ray")
    package = MissingExtraError("VLLMSampler", package="vllm")
    assert package.install == "pip install vllm" and str(package).endswith(": pip install vllm")
    assert isinstance(package, ImportError)


def test_require_imports_or_raises_missing_extra_error(monkeypatch):
    assert require("json", "a test") is sys.modules["json"]
    monkeypatch.setitem(sys.modules, "twinkle_no_such_module", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'twinkle\[hf\]'") as info:
        require("twinkle_no_such_module", "a test", "hf")
    assert info.value.name == "twinkle_no_such_module"
    assert isinstance(info.value.__cause__, ImportError)


def _call_sites():
    from flows.common import task_runner_for
    from twinkle.core.registry import environment_registry
    from twinkle.envs.agentenv import _import_e2b
    from twinkle.envs.openenv_discovery import import_openenv
    from twinkle.integrations.dataset import DatasetProvider
    from twinkle.protocol.openai import _import_openai
    from twinkle.rollout.multi_turn import MultiTurnRollout
    from twinkle.sampler.hf import _import_torch
    from twinkle.sampler.vllm import _import_vllm

    provider = DatasetProvider(environment_registry.get("multiple_choice"))
    return [
        ("openai", _import_openai, "pip install openai"),
        ("e2b", _import_e2b, "pip install 'twinkle[sandbox]'"),
        ("openenv.core.env_server", import_openenv, "pip install 'twinkle[openenv]'"),
        ("datasets", lambda: provider.to_hf_dataset([0]), "pip install 'twinkle[hf]'"),
        ("torch", _import_torch, "pip install 'twinkle[hf]'"),
        ("vllm", _import_vllm, "pip install vllm"),
        ("ray", MultiTurnRollout.remote, "pip install 'twinkle[ray]'"),
        ("prefect_ray", lambda: task_runner_for("ray://head:10001", 1), "twinkle[ray]"),
    ]


@pytest.mark.parametrize("index", range(8))
def test_call_sites_raise_missing_extra_error(index, monkeypatch):
    module, call, pip_line = _call_sites()[index]
    monkeypatch.setitem(sys.modules, module, None)  # as if the package were not installed
    with pytest.raises(MissingExtraError) as info:
        call()
    assert pip_line in str(info.value)


def test_vllm_error_keeps_its_advice(monkeypatch):
    from twinkle.sampler.vllm import _import_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(MissingExtraError) as info:
        _import_vllm()
    assert any("vllm serve" in note for note in info.value.__notes__)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import nosuchpkg_for_a_twinkle_test\n", "pip install nosuchpkg_for_a_twinkle_test"),
        (
            "from twinkle.errors import require\n"
            "require('nosuchpkg_for_a_twinkle_test', 'the fake command', 'ray')\n",
            "pip install 'twinkle[ray]'",
        ),
    ],
)
def test_cli_names_the_pip_line_of_a_missing_package(source, expected, tmp_path, monkeypatch):
    from twinkle.cli import _COMMANDS, main

    (tmp_path / "twinkle_fake_cmd.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(_COMMANDS, "fake", ("twinkle_fake_cmd", "cmd", "A fake command."))
    with pytest.raises(click.ClickException, match="'twinkle fake'") as info:
        main.get_command(click.Context(main), "fake")
    assert expected in info.value.message
