"""`twinkle env list` (adapters, extras, environments) and `twinkle env show` (a sample task)."""

import json

from click.testing import CliRunner

from twinkle.cli import main


def _run(*args):
    return CliRunner().invoke(main, ["env", *args])


def test_list_shows_adapters_with_their_extra_and_environments():
    result = _run("list")
    assert result.exit_code == 0, result.output
    assert "reasoning_gym  (twinkle[envs], installed)" in result.output
    assert "  reasoning_gym/leg_counting" in result.output
    assert "  gymnasium/FrozenLake-v1" in result.output
    assert "  tasks/math" in result.output


def test_list_json_for_one_adapter_and_unknown_adapter():
    result = _run("list", "--adapter", "gymnasium", "--json")
    record = json.loads(result.output)
    assert record["installed"] is True and record["extra"] == "twinkle[envs]"
    assert "Taxi-v4" in record["environments"]
    assert _run("list", "--adapter", "nope").exit_code != 0


def test_show_prints_a_sample_task_with_its_answer():
    result = _run("show", "reasoning_gym/leg_counting?size=5&seed=3", "--index", "1")
    assert result.exit_code == 0, result.output
    assert "reasoning_gym/leg_counting" in result.output and "tasks: 5" in result.output
    assert "--- user" in result.output and "--- expected answer" in result.output
    game = _run("show", "gymnasium/FrozenLake-v1", "--config", "is_slippery=false")
    assert game.exit_code == 0 and "Actions: left, down, right, up" in game.output


def test_show_reports_configuration_errors_cleanly():
    result = _run("show", "dialogue/tutoring")
    assert result.exit_code == 1 and "user_base_url" in result.output
    result = _run("show", "reasoning_gym/no_such_generator")
    assert result.exit_code == 1 and "not found" in result.output


def test_list_marks_an_adapter_that_cannot_be_installed():
    result = _run("list", "--adapter", "verifiers")
    assert "unavailable: verifiers cannot be installed beside" in result.output
