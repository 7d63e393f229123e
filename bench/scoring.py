"""Scoring benchmark: extraction + cleaning, Scorer.score_batch, and LLM-judge throughput.

Each figure is measured next to a baseline in the same run and printed as one JSON object:

* ``extraction``: the math environment's extractor (special-token and think-block
  cleaners, then boxed / #### / <answer> / pattern / last-number extraction, then the
  post-cleaners) on typical 1-2 KB responses, one core; baseline: a naive "last number"
  regex after one ``str.replace``. Target >= 50,000 responses/s.
* ``score_batch``: ``Scorer.score_batch`` on 10,000 math responses; baseline: a bare
  ``reset``/``step`` loop over the same environment. Target < 1 s.
* ``judge``: ``Scorer.score_batch`` with a ``JudgeReward`` (concurrency 64) against the
  test OpenAI server in its own process answering after 200 ms; baseline: a bare
  ``openai.AsyncOpenAI`` loop (semaphore of 64) sending the same judge prompts in the same
  run. Target >= 90 % of the baseline's throughput.
* ``envs``: the registry adapters (``bench/scoring_envs.py``): reasoning-gym scoring
  against the generators' own verifiers (target >= 0.8x), cold listing of every adapter
  (target < 2 s) and Gymnasium steps against the raw env (target >= 0.5x).

Times are the best of 3 rounds (alternating ours and the baseline for the judge), because
the machine is shared. Usage: ``python bench/scoring.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twinkle.core import Action
from twinkle.core.environments import MathEnvironment
from twinkle.integrations import Scorer

FILLER = [
    "First, let us restate the problem in our own words and list what is given.",
    "We know the quantities involved, so we can write down an equation for each step.",
    "Multiplying {a} by {b} gives {ab}, which is the intermediate total we need.",
    "Then we subtract {c} from that amount, being careful with the units.",
    "Checking the arithmetic again: {a} x {b} = {ab}, and nothing else changes.",
    "Note that 2025 items, 1,234 boxes and 3/4 of a cup are only examples of formats.",
    "It is easy to make an off-by-one mistake here, so we count the cases explicitly.",
    "<think>hmm, should I double check {c}? yes, {c} is right</think>",
]
ENDINGS = [
    "Therefore the final answer is \\boxed{{{ans}}}.",
    "#### {ans}",
    "<answer>{ans}</answer><|im_end|>",
    "So the answer is {ans}.",
    "The result is $\\boxed{{{ans}}}$",
    "x = {ans}",
    "I am not sure what the answer is.",
]


def make_responses(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        target = rng.randint(1000, 2000)
        parts: list[str] = []
        while sum(map(len, parts)) < target:
            a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(1, 500)
            parts.append(rng.choice(FILLER).format(a=a, b=b, ab=a * b, c=c))
        parts.append(rng.choice(ENDINGS).format(ans=rng.randint(1, 5000)))
        out.append(" ".join(parts))
    return out


_NAIVE_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def naive_extract(text: str) -> str | None:
    found = _NAIVE_NUMBER.findall(text.replace("<|im_end|>", ""))
    return found[-1] if found else None


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def best_of(rounds, fn, *args):
    """``fn(*args)`` ``rounds`` times: the last result and the fastest time (timeit's rule:
    slower rounds measure other processes on the machine, not the code)."""
    best = float("inf")
    for _ in range(rounds):
        result, t = timed(fn, *args)
        best = min(best, t)
    return result, best


def check_judge_work(failures: list[int], n_ours: int, base_texts: list, n: int, extract) -> None:
    """Raise unless every round so far of ours scored ``n`` calls with no judge failure
    (``failures``: one count per round) and the bare loop got ``n`` replies that parse as
    scores."""
    # JudgeReward never raises: a failed call returns the default score fast, faking speed.
    if any(failures) or n_ours != n:
        raise RuntimeError(f"judge: {n_ours}/{n} scored, failures per round {failures}")
    bad = sum(extract(t) is None for t in base_texts)
    if len(base_texts) != n or bad:
        raise RuntimeError(f"judge: bare loop gave {len(base_texts)}/{n} replies, {bad} unparsed")


def bench_extraction(n: int) -> dict:
    env = MathEnvironment()
    responses = make_responses(n)
    extract = env.extractor.extract
    for r in responses[:200]:  # warm caches
        extract(r)
    ours, t_ours = best_of(3, lambda: [extract(r) for r in responses])
    _, t_base = best_of(3, lambda: [naive_extract(r) for r in responses])
    found = sum(a is not None for a, _ in ours)
    return {
        "responses": n,
        "mean_chars": round(sum(map(len, responses)) / n),
        "ours_per_s": round(n / t_ours),
        "naive_regex_per_s": round(n / t_base),
        "ours_vs_naive": round(t_base / t_ours, 3),
        "found_ratio": round(found / n, 3),
        "rounds": 3,
        "target_per_s": 50_000,
        "meets_target": n / t_ours >= 50_000,
    }


def bench_score_batch(n: int) -> dict:
    env = MathEnvironment()
    scorer = Scorer(env)
    answers = [t["answer"] for t in env.tasks]
    rng = random.Random(1)
    indices = [rng.randrange(len(env)) for _ in range(n)]
    responses = [
        f"Step by step: the total comes to {rng.randint(1, 99)} first, then we adjust. "
        f"\\boxed{{{answers[i]}}}"
        if rng.random() < 0.7
        else "The answer is 12345."
        for i in indices
    ]
    scorer.score_batch(indices[:100], responses[:100])

    def bare():
        out = []
        for i, r in zip(indices, responses):
            state, _ = env.reset(options={"task_index": i})
            out.append(env.step(state, Action.from_text(r)).rewards.total)
        return out

    results, t_ours = best_of(3, scorer.score_batch, indices, responses)
    base, t_base = best_of(3, bare)
    assert [r.total for r in results] == base
    return {
        "responses": n,
        "scorer_seconds": round(t_ours, 4),
        "bare_reset_step_seconds": round(t_base, 4),
        "scorer_overhead_ratio": round(t_ours / t_base, 3),
        "correct_ratio": round(sum(r.total for r in results) / n, 3),
        "rounds": 3,
        "target_seconds": 1.0,
        "meets_target": t_ours < 1.0 if n == 10_000 else None,
    }


def bench_judge(n: int, delay_ms: float = 200.0, concurrency: int = 64, rounds: int = 3) -> dict:
    from openai import AsyncOpenAI

    from twinkle.core.judge import JudgeReward
    from twinkle.testing.openai_server import OpenAIServer

    with OpenAIServer.subprocess(delay_ms=delay_ms, policy="judge") as server:
        url = server.base_url
        judge = JudgeReward.from_endpoint(url, "judge", "correctness", max_concurrency=concurrency)
        env = MathEnvironment(extra_rewards=[judge])
        scorer = Scorer(env)
        indices = [i % len(env) for i in range(n)]
        responses = [f"We compute carefully. \\boxed{{{i}}}" for i in range(n)]
        prompts = []
        for i, r in zip(indices, responses):
            state, _ = env.reset(options={"task_index": i})
            q, resp, gt = judge.context(state, Action.from_text(r))
            prompts.append([m.to_dict() for m in judge.messages(q, resp, gt)])

        async def bare() -> list[str]:
            client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
            sem = asyncio.Semaphore(concurrency)

            async def one(messages):
                async with sem:
                    out = await client.chat.completions.create(
                        model="judge", messages=messages, temperature=0.0, max_tokens=512
                    )
                    return out.choices[0].message.content

            try:
                return await asyncio.gather(*(one(m) for m in prompts))
            finally:
                await client.close()

        # warm both paths (connections, imports) on a small batch
        scorer.score_batch(indices[:concurrency], responses[:concurrency])
        asyncio.run(bare())
        # Alternate the two and keep each one's best round: the server shares the cores with
        # the client, so background load shows up as noise in whichever runs at that moment.
        t_ours = t_base = float("inf")
        failures = []  # judge failures per round: the best time may come from any round
        for _ in range(rounds):
            base_texts, t = timed(lambda: asyncio.run(bare()))
            t_base = min(t_base, t)
            results, t = timed(scorer.score_batch, indices, responses)
            t_ours = min(t_ours, t)
            failures.append(
                sum(1 for r in results if r.error or r.metadata.get("judge", {}).get("error"))
            )
            check_judge_work(failures, len(results), base_texts, n, judge.score_extractor)
    failed = sum(failures)
    ratio = t_base / t_ours
    return {
        "calls": n,
        "concurrency": concurrency,
        "server_delay_ms": delay_ms,
        "ours_calls_per_s": round(n / t_ours, 1),
        "bare_async_openai_calls_per_s": round(n / t_base, 1),
        "ideal_calls_per_s": round(concurrency / (delay_ms / 1000), 1),
        "ours_vs_bare": round(ratio, 3),
        "rounds": rounds,
        "judge_failures": failed,
        "bare_answers": len(base_texts),
        "target_ratio": 0.9,
        "meets_target": ratio >= 0.9 and failed == 0,
    }


def bench_envs(quick: bool) -> dict:
    """The registry adapters' figures (``bench/scoring_envs.py``): reasoning-gym scoring vs
    its verifier, cold listing, Gymnasium steps vs the raw env."""
    import importlib.util

    if importlib.util.find_spec("reasoning_gym") is None:
        return {"skipped": "pip install 'twinkle[envs]'"}
    path = Path(__file__).with_name("scoring_envs.py")
    spec = importlib.util.spec_from_file_location("twinkle_bench_scoring_envs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.report(quick)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    n_extract, n_score, n_judge = (3_000, 10_000, 192) if args.quick else (40_000, 10_000, 1_280)
    report = {
        "benchmark": "scoring",
        "quick": args.quick,
        "extraction": bench_extraction(n_extract),
        "score_batch": bench_score_batch(n_score),
        "judge": bench_judge(n_judge),
        "envs": bench_envs(args.quick),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
