"""bench/scoring_envs.py runs at a tiny scale and reports consistent figures."""

import pytest

from .conftest import load_bench

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench():
    with load_bench("scoring_envs") as module:
        yield module


def test_reasoning_gym_scores_match_the_verifier_and_figures_are_sane(bench):
    report = bench.bench_reasoning_gym(200, rounds=1)
    assert report["scores_equal_verifier"] is True
    assert report["extraction_equals_reasoning_gym"] is True
    assert set(report["generators"]) == set(bench.GENERATORS)
    assert report["mix_ours_per_s"] > 0 and report["mix_ratio"] > 0
    assert report["given_extracted_mix_ratio"] > 0
    assert all(g["given_extracted_ours_per_s"] > 0 for g in report["generators"].values())
    below = [n for n, g in report["generators"].items() if g["ratio"] < 0.8]
    assert report["generators_below_target"] == sorted(below)
    assert report["meets_target"] is (not below)


def test_listing_and_gymnasium_figures(bench):
    listing = bench.bench_listing_cold(rounds=1)
    assert listing["environments"] > 100 and listing["adapters"] >= 6
    gym = bench.bench_gymnasium(200, rounds=1)
    assert set(gym["games"]) == {name for name, _ in bench.GAMES}
    games = gym["games"].values()
    assert all(g["ours_steps_per_s"] > 0 and g["raw_step_only_per_s"] > 0 for g in games)
    assert all(g["ratio_vs_raw_text"] > 0 for g in games)
    # The headline judges the stricter baseline, the raw step without text.
    below = sorted(n for n, g in gym["games"].items() if g["ratio_vs_raw_step_only"] < 0.5)
    assert gym["games_below_target"] == below and gym["meets_target"] is (not below)
    below_text = sorted(n for n, g in gym["games"].items() if g["ratio_vs_raw_text"] < 0.5)
    assert gym["games_below_target_vs_raw_text"] == below_text
    assert gym["all_ratio_vs_raw_step_only"] > 0 and gym["all_ratio_vs_raw_text"] > 0


def test_only_runs_the_named_sections(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "bench_gymnasium", lambda steps: {"steps": steps})
    bench.main(["--quick", "--only", "gymnasium"])
    out = capsys.readouterr().out
    assert '"gymnasium_steps"' in out and '"steps": 1000' in out
    assert "reasoning_gym_scoring" not in out and "listing_cold" not in out
    assert set(bench.report(True, ("gymnasium",))) == {"gymnasium_steps"}


def test_gymnasium_guard_refuses_sides_that_did_other_work(bench):
    raw = [(-3.0, 1, 0), (0.0, 0, 0)]
    bench.check_same_steps("G", {"ours": list(raw), "raw_step_only": raw})  # the same: passes
    with pytest.raises(RuntimeError, match="invalid actions"):
        bench.check_same_steps("G", {"ours": [(-3.0, 1, 0), (0.0, 0, 2)], "raw_step_only": raw})
    with pytest.raises(RuntimeError, match="slice 1"):
        bench.check_same_steps("G", {"ours": [(-3.0, 1, 0), (0.0, 1, 0)], "raw_step_only": raw})
    with pytest.raises(RuntimeError, match="raw_text did not play"):
        bench.check_same_steps("G", {"raw_text": [(-2.0, 1, 0)] + raw[1:], "raw_step_only": raw})
