"""Package-level guarantees: light imports, and a CLI that answers --help."""

import subprocess
import sys

import pytest

LIGHT_MODULES = [
    "twinkle",
    "twinkle.data_format",
    "twinkle.preprocessor",
    "twinkle.envs",
    "twinkle.core",
    "twinkle.tools",
    "twinkle.protocol",
    "twinkle.rollout",
    "twinkle.sampler",
    "twinkle.sandbox",
    "twinkle.integrations",
    "twinkle.container",
    "twinkle.tracking",
    "twinkle.cli",
    "twinkle.io",
]
HEAVY = [
    "prefect",
    "mlflow",
    "ray",
    "presidio_analyzer",
    "spacy",
    "torch",
    "transformers",
    "e2b",
    "openai",
    "fastapi",
    "uvicorn",
    "numpy",
    "pyarrow",
    "datasketch",
    "openenv",
]


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_light_modules_import_no_heavy_package(module):
    code = f"import sys, {module}; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"{module} imports {out.stdout.strip()} at import time"


def test_cli_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "twinkle", "--help"], capture_output=True, text=True, check=True
    )
    for name in ("run", "curate", "sandbox", "env"):
        assert name in out.stdout


def test_missing_optional_extra_names_the_extra():
    # Simulate an install without the `pii` extra: presidio cannot be imported.
    code = (
        "import sys; sys.modules['presidio_analyzer'] = None\n"
        "from twinkle.preprocessor import PIIPresidioFilter\n"
        "try:\n    PIIPresidioFilter()\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pii" in out.stdout


def test_preprocessor_all_lists_the_eager_and_lazy_names():
    import twinkle.preprocessor as pre

    eager = {"Filter", "Mapper", "map_col_to_row", "map_row_to_col"}
    assert sorted(pre.__all__) == sorted(eager | set(pre._LAZY))
