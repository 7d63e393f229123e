"""The rollout stack imports no heavy or optional package until it is used."""

import subprocess
import sys

MODULES = [
    "twinkle.tools",
    "twinkle.envs.env_tool",
    "twinkle.protocol",
    "twinkle.protocol.base",
    "twinkle.protocol.openai",
    "twinkle.protocol.replay",
    "twinkle.rollout",
    "twinkle.rollout.api_multi_turn",
    "twinkle.rollout.multi_turn",
    "twinkle.rollout.traces",
    "twinkle.rollout.runner",
    "twinkle.sandbox.endpoint",
    "twinkle.preflight",
    "twinkle.sampler",
    "twinkle.sampler.template",
    "twinkle.sampler.scripted",
    "twinkle.sampler.hf",
    "twinkle.sampler.vllm",
]
HEAVY = [
    "torch",
    "transformers",
    "tokenizers",
    "openai",
    "ray",
    "vllm",
    "fastapi",
    "uvicorn",
    "prefect",
    "mlflow",
]


def test_rollout_modules_are_light():
    code = (
        f"import sys, importlib; [importlib.import_module(m) for m in {MODULES!r}];"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_exports_resolve():
    import twinkle.protocol
    import twinkle.rollout
    import twinkle.sampler

    for package in (twinkle.protocol, twinkle.rollout, twinkle.sampler):
        assert len(set(package.__all__)) == len(package.__all__)
        for name in package.__all__:
            assert getattr(package, name) is not None
