"""`twinkle run --envs FILE`: the file's environments become the flow's tasks (checked early)."""

from click.testing import CliRunner

from twinkle.cli import main


def test_envs_file_is_validated_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("environments: 3\n")
    result = CliRunner().invoke(main, ["run", "--envs", str(bad)])
    assert result.exit_code == 2 and "--envs" in result.output
    good = tmp_path / "envs.yaml"
    good.write_text("environments:\n  - {adapter: reasoning_gym, name: leg_counting}\n")
    result = CliRunner().invoke(main, ["run", "--envs", str(good)])
    assert result.exit_code == 2 and "policy model" in result.output
