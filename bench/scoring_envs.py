"""Registry adapter figures for ``bench/scoring.py`` (also runnable alone).

* ``reasoning_gym``: answers/s of ``ReasoningGymEnvironment.score_responses`` (think-block
  and special-token cleaning, ``<answer>`` extraction, the generator's verifier) against
  calling reasoning-gym directly (``extract_answer`` + ``dataset.score_answer``) on the same
  answers, over a mix of generators, each generator's figure and the mix's. Answers come with
  and without ``<think>`` blocks. Target: the mix at >= 0.8x.
* ``listing_cold``: ``environment_registry.list_environments()`` in a fresh interpreter
  (import included), best of 3. Target < 2 s.
* ``gymnasium``: episode steps/s through the adapter (extraction, ActionMapper, the board
  as text, immutable states) against the raw Gymnasium env giving the same text (``step`` +
  its ``ansi`` render; Blackjack has no render), the same actions and resets. The raw
  ``step`` alone is reported too. Target: >= 0.5x the raw text env, for every game.

Rounds alternate ours and the baseline and keep each one's best, because the machine is
shared. Usage: ``python bench/scoring_envs.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GENERATORS = (
    "leg_counting",
    "basic_arithmetic",
    "chain_sum",
    "spell_backward",
    "word_sorting",
    "letter_counting",
    "family_relationships",
    "number_sorting",
)
GAMES = (
    ("FrozenLake-v1", {"is_slippery": False}),
    ("Taxi-v4", {}),
    ("CliffWalking-v1", {}),
    ("Blackjack-v1", {}),
)


def alternate(rounds: int, *fns):
    """Run the functions in turn ``rounds`` times; each one's best time and last result."""
    best = [float("inf")] * len(fns)
    results = [None] * len(fns)
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            results[k] = fn()
            best[k] = min(best[k], time.perf_counter() - start)
    return best, results


def bench_reasoning_gym(n: int, rounds: int = 7) -> dict:
    from reasoning_gym.utils import extract_answer

    from twinkle.core.registry import environment_registry

    per, t_ours_all, t_base_all = {}, 0.0, 0.0
    for name in GENERATORS:
        env = environment_registry.get(name, adapter="reasoning_gym", size=200, seed=1)
        entries = [env.task(i)["entry"] for i in range(len(env))]
        rng = random.Random(0)
        indices = [rng.randrange(len(env)) for _ in range(n)]
        responses = []
        for i in indices:
            answer = entries[i]["answer"] if rng.random() < 0.6 else "not it"
            think = "<think>First I list the facts, then I check them.</think>" * (i % 2)
            responses.append(f"{think}Working through it step by step. <answer>{answer}</answer>")
        verify = env.dataset.score_answer

        def ours(env=env, indices=indices, responses=responses):
            return env.score_responses(indices, responses)

        def direct(entries=entries, indices=indices, responses=responses, verify=verify):
            return [
                float(verify(extract_answer(r), entries[i])) for i, r in zip(indices, responses)
            ]

        ours(), direct()  # warm the task cache and the verifier
        (t_ours, t_base), (got, want) = alternate(rounds, ours, direct)
        assert got == want, f"{name}: scores differ from the verifier's"
        t_ours_all += t_ours
        t_base_all += t_base
        per[name] = {
            "ours_per_s": round(n / t_ours),
            "direct_per_s": round(n / t_base),
            "ratio": round(t_base / t_ours, 3),
        }
    ratio = t_base_all / t_ours_all
    total = n * len(GENERATORS)
    return {
        "answers_per_generator": n,
        "generators": per,
        "mix_ours_per_s": round(total / t_ours_all),
        "mix_direct_per_s": round(total / t_base_all),
        "mix_ratio": round(ratio, 3),
        "scores_equal_verifier": True,
        "rounds": rounds,
        "target_ratio": 0.8,
        "meets_target": ratio >= 0.8,
    }


LIST_COLD = (
    "import time; t = time.perf_counter()\n"
    "from twinkle.core.registry import environment_registry as r\n"
    "n = len(r.list_environments()); print(time.perf_counter() - t, n, len(r.list_adapters()))"
)


def bench_listing_cold(rounds: int = 3) -> dict:
    best, count, adapters = float("inf"), 0, 0
    for _ in range(rounds):
        out = subprocess.run(
            [sys.executable, "-c", LIST_COLD], capture_output=True, text=True, check=True
        ).stdout.split()
        best, count, adapters = min(best, float(out[0])), int(out[1]), int(out[2])
    return {
        "seconds": round(best, 3),
        "adapters": adapters,
        "environments": count,
        "rounds": rounds,
        "target_seconds": 2.0,
        "meets_target": best < 2.0,
    }


def bench_gymnasium(steps: int, rounds: int = 7) -> dict:
    import gymnasium as gym

    from twinkle.core import Action
    from twinkle.core.registry import environment_registry

    per, t_ours_all, t_text_all = {}, 0.0, 0.0
    for name, kwargs in GAMES:
        env = environment_registry.get(name, adapter="gymnasium", **kwargs)
        names = env.mapper.names
        rng = random.Random(0)
        actions = [rng.randrange(len(names)) for _ in range(steps)]
        replies = [Action.from_text(f"I move <action>{names[a]}</action>") for a in actions]
        render = None if name.startswith("Blackjack") else "ansi"
        raw_text = gym.make(name, render_mode=render, **kwargs)
        raw = gym.make(name, **kwargs)
        limit = env.spec.max_steps

        def ours(env=env, replies=replies):
            state, _ = env.reset(seed=0)
            for reply in replies:
                result = env.step(state, reply)
                state = result.next_state
                if result.done:
                    state, _ = env.reset(seed=0)

        def raw_loop(raw, text, actions=actions, limit=limit):
            raw.reset(seed=0)
            n = 0
            for a in actions:
                _, _, terminated, truncated, _ = raw.step(a)
                if text:
                    raw.render()
                n += 1
                if terminated or truncated or n >= limit:
                    raw.reset(seed=0)
                    n = 0

        def text_env(raw=raw_text, render=render):
            raw_loop(raw, render is not None)

        def bare(raw=raw):
            raw_loop(raw, False)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours(), text_env(), bare()
            (t_ours, t_text, t_bare), _ = alternate(rounds, ours, text_env, bare)
        t_ours_all += t_ours
        t_text_all += t_text
        per[name] = {
            "ours_steps_per_s": round(steps / t_ours),
            "raw_text_steps_per_s": round(steps / t_text),
            "raw_step_only_per_s": round(steps / t_bare),
            "ratio_vs_raw_text": round(t_text / t_ours, 3),
            "ratio_vs_raw_step_only": round(t_bare / t_ours, 3),
        }
    ratio = t_text_all / t_ours_all
    below = sorted(name for name, g in per.items() if g["ratio_vs_raw_text"] < 0.5)
    return {
        "steps_per_game": steps,
        "games": per,
        "all_ratio_vs_raw_text": round(ratio, 3),
        "games_below_target": below,
        "rounds": rounds,
        "target_ratio": 0.5,
        "meets_target": not below,  # every game, not only the time-weighted mix
    }


def report(quick: bool) -> dict:
    n, steps = (2_000, 1_000) if quick else (20_000, 10_000)
    return {
        "reasoning_gym_scoring": bench_reasoning_gym(n),
        "listing_cold": bench_listing_cold(),
        "gymnasium_steps": bench_gymnasium(steps),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    print(
        json.dumps(
            {"benchmark": "scoring_envs", "quick": args.quick, **report(args.quick)}, indent=2
        )
    )


if __name__ == "__main__":
    main()
