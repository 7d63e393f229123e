"""Package-level guarantees: a light import, and a CLI that answers --help."""

import subprocess
import sys


def test_import_twinkle_is_light():
    code = (
        "import sys, twinkle, twinkle.data_format, twinkle.preprocessor, twinkle.envs, twinkle.core;"
        "heavy = [m for m in ('prefect', 'mlflow', 'ray', 'presidio_analyzer', 'torch', 'e2b', 'openai')"
        " if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "twinkle", "--help"], capture_output=True, text=True, check=True
    )
    for name in ("run", "curate", "sandbox", "env"):
        assert name in out.stdout
