"""Benchmark: twinkle's OpenEnv adapters vs plain OpenEnv use, on the number_guess env.

- embedded: ``OpenEnv.step`` (tool call -> typed action -> text observation, reward sum)
  vs calling ``NumberGuessEnvironment.step(GuessAction(...))`` directly;
- server: ``OpenEnvClient.step`` vs the plain typed OpenEnv client (``.sync()``), both over
  one WebSocket session to an in-thread uvicorn server on 127.0.0.1;
- pool: ``EnvPool.step_batch`` over in-process shards vs stepping each adapter in a loop.

Each episode is a reset followed by a fixed guess sequence. Prints one JSON object with
steps/s and the overhead ratios (adapter time / plain time).

Usage: python bench/openenv_adapters.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import threading
import time

GUESSES = [50, 25, 12, 6, 3, 1, 2]  # target 2: six hints, then the hit


def check_episodes(side: str, steps: list, per_round: int = 1) -> None:
    """Raise unless every episode in ``steps`` (step results in loop order) ran cleanly: no
    error, not done until the last guess, then done with a total reward of 1.0. ``per_round``
    episodes step interleaved (the pool: each guess over all slots in turn)."""
    # Our adapters return errors as data (cheaper, unstepped steps), so a figure needs this.
    n, block = len(GUESSES), len(GUESSES) * per_round
    if not steps or len(steps) % block:
        raise RuntimeError(f"{side}: {len(steps)} step results, not whole episodes of {n}")
    for start in range(0, len(steps), block):
        for slot in range(per_round):
            episode = steps[start + slot : start + block : per_round]
            for r in episode:
                obs, info = getattr(r, "observation", None), getattr(r, "info", None) or {}
                if info.get("error") or (isinstance(obs, str) and obs.startswith("Error:")):
                    raise RuntimeError(f"{side}: a step failed: {info.get('error') or obs!r}")
            done = [bool(r.done) for r in episode]
            reward = sum(r.reward or 0.0 for r in episode)
            if done != [False] * (n - 1) + [True] or reward != 1.0:
                raise RuntimeError(f"{side}: an episode ended wrong: done={done}, reward={reward}")


def embedded(episodes: int) -> dict[str, float]:
    from twinkle.envs.openenv import OpenEnv
    from twinkle.envs.openenv_envs.number_guess import GuessAction
    from twinkle.envs.openenv_envs.number_guess.server import NumberGuessEnvironment

    raw = NumberGuessEnvironment()
    keep: list = []  # every step's result, checked after the clock (one append per step)
    t = time.perf_counter()
    for _ in range(episodes):
        raw.reset(target=2)
        for g in GUESSES:
            keep.append(raw.step(GuessAction(guess=g)))
    plain = time.perf_counter() - t
    check_episodes("embedded plain", keep)

    env = OpenEnv(env_name="number_guess")
    keep = []
    t = time.perf_counter()
    for _ in range(episodes):
        env.reset(target=2)
        for g in GUESSES:
            keep.append(env.step("guess", {"guess": g}))
    ours = time.perf_counter() - t
    check_episodes("embedded ours", keep)
    steps = episodes * len(GUESSES)
    return {
        "embedded_plain_steps_per_s": round(steps / plain),
        "embedded_ours_steps_per_s": round(steps / ours),
        "embedded_overhead": round(ours / plain, 2),
    }


def server(episodes: int) -> dict[str, float]:
    import uvicorn

    from twinkle.envs.openenv import OpenEnvClient
    from twinkle.envs.openenv_envs.number_guess import GuessAction, NumberGuessEnv
    from twinkle.envs.openenv_envs.number_guess.server.asgi import create_number_guess_app

    srv = uvicorn.Server(
        uvicorn.Config(create_number_guess_app(4), host="127.0.0.1", port=0, log_level="error")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}"
    try:
        raw = NumberGuessEnv(base_url=url).sync()
        raw.reset(target=2)
        keep: list = []  # every step's result, checked after the clock (one append per step)
        t = time.perf_counter()
        for _ in range(episodes):
            raw.reset(target=2)
            for g in GUESSES:
                keep.append(raw.step(GuessAction(guess=g)))
        plain = time.perf_counter() - t
        raw.close()
        check_episodes("server plain", keep)

        env = OpenEnvClient(env_name="number_guess", base_url=url)
        env.reset(target=2)
        keep = []
        t = time.perf_counter()
        for _ in range(episodes):
            env.reset(target=2)
            for g in GUESSES:
                keep.append(env.step("guess", {"guess": g}))
        ours = time.perf_counter() - t
        env.close()
        check_episodes("server ours", keep)
    finally:
        srv.should_exit = True
        thread.join(10)
    steps = episodes * len(GUESSES)
    return {
        "server_plain_steps_per_s": round(steps / plain),
        "server_ours_steps_per_s": round(steps / ours),
        "server_overhead": round(ours / plain, 2),
    }


def pool(slots: int, rounds: int) -> dict[str, float]:
    from twinkle.envs.openenv import EnvPool

    p = EnvPool(pool_size=slots, env_kwargs={"env_name": "number_guess"}, world_size=2)
    adapters = p.get_adapters()
    idx = list(range(slots))
    keep: list = []  # every step's result, checked after the clock (one append per step)
    t = time.perf_counter()
    for _ in range(rounds):
        for a in adapters:
            a.reset(target=2)
        for g in GUESSES:
            for a in adapters:
                keep.append(a.step("guess", {"guess": g}))
    loop = time.perf_counter() - t
    check_episodes("pool loop", keep, slots)
    keep = []
    t = time.perf_counter()
    for _ in range(rounds):
        p.reset_batch(idx, target=2)
        for g in GUESSES:
            keep.extend(p.step_batch(idx, ["guess"] * slots, [{"guess": g}] * slots))
    batch = time.perf_counter() - t
    p.close()
    check_episodes("pool batch", keep, slots)
    steps = rounds * slots * len(GUESSES)
    return {
        "pool_loop_steps_per_s": round(steps / loop),
        "pool_batch_steps_per_s": round(steps / batch),
        "pool_batch_speedup": round(loop / batch, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    scale = 1 if a.quick else 10
    out = {"episode_steps": len(GUESSES)}
    out |= embedded(200 * scale)
    out |= server(20 * scale)
    out |= pool(16, 5 * scale)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
