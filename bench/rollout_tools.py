"""Tool-using rollout benchmarks, run by ``bench/rollout.py --parts tools,lean,scale``.

The workload: the scripted OpenAI server (``--policy weather``) in its own process answers
every call after ``delay_ms``. Each trajectory makes two model calls with one tool call
between them: the model asks ``get_weather`` for a city, the tool returns a paragraph, the
model answers. The bare loop does the same work with nothing but ``openai.AsyncOpenAI``, a
semaphore and a list; the weather tool runs inline there, and in ours it declares
``blocking = False`` so it runs inline too (``ours_threaded`` sends the same tool through the
worker-thread path that blocking tools take). Runs are warm and go in rounds: each round
runs every variant once, in an order rotated each round, every run from a collected heap
(``gc.collect()``). Reported: the best run of each variant (the headline ratio), the ratio
within each round and their median, client CPU per call (best and every round), every
run's wall time, and the 1-minute load average before and after. The physical limit is
concurrency / delay calls per second.

* ``tools``: ours (SDK transport) and ours with the lean transport vs the bare SDK loop, at
  64, 256 and 1,024 trajectories, concurrency 128.
* ``lean``: client CPU per call and throughput of ours over the SDK transport, ours over the
  lean transport and the bare SDK loop, at concurrency 256; also the server process's CPU
  per call (the ceiling once the client is lean).
* ``scale``: ``APIMultiTurnRollout.remote`` Ray actors (lean transport), 1 and 2 workers
  splitting the same batch: total throughput and the per-worker rate.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import statistics
import sys
import time
from typing import Any

WEATHER = (
    "{city}: partly cloudy with a light westerly breeze. The temperature is 14 C, falling to "
    "9 C overnight, with a 20% chance of showers after midnight. Humidity is 71%, visibility "
    "10 km and the UV index is low. Sunrise is at 07:42 and sunset at 16:58. Tomorrow brings "
    "clearer skies and a high of 16 C."
)
TOOL_TURNS = 2  # model calls per trajectory: a tool call, then the answer


class Weather:
    """The weather lookup: a canned paragraph, so the figures measure rollout machinery."""

    blocking = False

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        return WEATHER.format(city=arguments.get("city", "?"))

    def tool_info(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The current weather and tonight's forecast for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }


class BlockingWeather(Weather):
    blocking = True


def prompts(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"w{i}", "messages": [{"role": "user", "content": f"What is the weather in {i}?"}]}
        for i in range(n)
    ]


async def sdk_loop(
    base_url: str, rows: list[dict[str, Any]], concurrency: int, tool: Any, turns: int
) -> float:
    """A bare ``AsyncOpenAI`` rollout: model calls and ``tool`` calls with nothing but the SDK,
    a semaphore and a list; returns the seconds the rows took (client set-up left out). Raises
    unless every row made ``turns`` model calls and ended in an answer, as ours must."""
    import openai

    # The timeout ``OpenAI`` sets, and the SDK's default retries (``OpenAI`` retries too): on
    # a loaded machine the SDK's 5 s connect timeout fails 256 connects at once, and a
    # kept-alive connection can be dropped under a request; the run would end in an error.
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=2, timeout=180.0)
    tools = [tool.tool_info()]
    semaphore = asyncio.Semaphore(concurrency)
    calls = answered = 0  # an integer increment each: no measurable cost

    async def one(trajectory: dict[str, Any]) -> None:
        nonlocal calls, answered
        messages = list(trajectory["messages"])
        async with semaphore:
            for _ in range(turns):
                response = await client.chat.completions.create(
                    model="m", messages=messages, tools=tools
                )
                calls += 1
                message = response.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    answered += 1
                    break
                for call in message.tool_calls:
                    arguments = json.loads(call.function.arguments)
                    content = tool(call.function.name, arguments)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})

    started = time.perf_counter()
    await asyncio.gather(*(one(t) for t in rows))
    elapsed = time.perf_counter() - started
    await client.close()
    # A baseline that stopped early did less work than ours: refuse it.
    if calls != len(rows) * turns or answered != len(rows):
        raise RuntimeError(
            f"bare loop did not complete as scripted: {calls} model calls "
            f"(expected {len(rows)} rows x {turns}), {answered} answered"
        )
    return elapsed


async def bare_loop(base_url: str, n: int, concurrency: int) -> None:
    """The baseline of the weather workload (``sdk_loop`` over its rows and tool)."""
    await sdk_loop(base_url, prompts(n), concurrency, Weather(), TOOL_TURNS)


def rollout_for(base_url: str, concurrency: int, transport: str, tool: Any) -> Any:
    from twinkle.protocol.openai import OpenAI
    from twinkle.rollout import APIMultiTurnRollout
    from twinkle.tools import ToolManager

    return APIMultiTurnRollout(
        OpenAI("m", api_key="x", base_url=base_url, transport=transport),
        ToolManager({"get_weather": tool}),
        max_turns=TOOL_TURNS + 1,
        concurrency=concurrency,
    )


def check(out: list[dict[str, Any]], n: int) -> None:
    reasons = {o["stop_reason"] for o in out}
    if len(out) != n or reasons != {"stop"} or any(o["turns"] != TOOL_TURNS for o in out):
        raise RuntimeError(f"rollout did not complete as scripted: {reasons}")
    if not out[0]["messages"][2]["content"].startswith("Oslo: partly cloudy"):
        raise RuntimeError("the tool result is not in the history")


def ours(base_url: str, n: int, concurrency: int, transport: str, tool: Any) -> None:
    check(rollout_for(base_url, concurrency, transport, tool)(prompts(n)), n)


def _server_cpu_s(pid: int | None) -> float | None:
    """CPU seconds used so far by the server process (Linux /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return None


def _interleaved(variants: dict[str, Any], repeats: int, pid: int | None) -> dict[str, Any]:
    """Every round runs every variant once, in an order rotated each round, so that machine
    noise (other processes on the shared cores) hits all alike. Returns each variant's runs,
    ``(wall s, client CPU s, server CPU s or None)`` per round, in round order."""
    runs: dict[str, list[tuple[float, float, float | None]]] = {k: [] for k in variants}
    order = list(variants)
    for _ in range(repeats):
        for name in order:
            # A full collection of this process's heap takes 0.1-0.2 s on a busy machine: start
            # every run from a collected heap, so one does not land at random in a short run.
            gc.collect()
            server = _server_cpu_s(pid)
            wall, cpu = time.perf_counter(), time.process_time()
            variants[name]()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            after = _server_cpu_s(pid)
            runs[name].append((wall, cpu, None if server is None else after - server))
        order = order[1:] + order[:1]
    return runs


def _best(runs: dict[str, Any]) -> dict[str, Any]:
    """The fastest run (by wall time) of each variant."""
    return {k: min(v, key=lambda r: r[0]) for k, v in runs.items()}


def _versus(runs: dict[str, Any], name: str, base: str) -> dict[str, Any]:
    """``name``'s throughput relative to ``base``'s three ways: best run against best run (the
    headline), the median of the rounds' ratios (each round ran both back to back), and client
    CPU (best against best: what throughput the CPU allows, the least noisy)."""
    best = _best(runs)
    rounds = [b[0] / o[0] for b, o in zip(runs[base], runs[name])]
    return {
        f"{name}_vs_{base}": round(best[base][0] / best[name][0], 3),
        f"{name}_vs_{base}_median_round": round(statistics.median(rounds), 3),
        f"{name}_vs_{base}_rounds": [round(r, 3) for r in rounds],
        f"{name}_vs_{base}_cpu": round(
            min(r[1] for r in runs[base]) / min(r[1] for r in runs[name]), 3
        ),
    }


def _setup(
    delay_ms: float, n: int, concurrency: int, calls: int, repeats: int, load: float, ideal: float
) -> dict[str, Any]:
    """What a workload's report row starts with: its settings, the load before and now."""
    return {
        "delay_ms": delay_ms,
        "trajectories": n,
        "concurrency": concurrency,
        "model_calls": calls,
        "repeats": repeats,
        "load_average_1m": [load, _load()],
        "ideal_calls_per_s": round(ideal, 1),
    }


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _server(delay_ms: float) -> Any:
    from twinkle.testing.openai_server import OpenAIServer

    return OpenAIServer.subprocess(delay_ms=delay_ms, policy="weather", turns=TOOL_TURNS - 1)


def bench_tools(
    delay_ms: float, sizes: list[int], concurrency: int, repeats: int
) -> list[dict[str, Any]]:
    ideal = concurrency / (delay_ms / 1000.0)
    results = []
    with _server(delay_ms) as server:
        url, pid = server.base_url, server._proc.pid if server._proc else None
        asyncio.run(bare_loop(url, 32, 32))  # warm both sides
        ours(url, 32, 32, "sdk", Weather())
        ours(url, 32, 32, "lean", Weather())
        for n in sizes:
            variants = {
                "bare": lambda n=n: asyncio.run(bare_loop(url, n, concurrency)),
                "ours": lambda n=n: ours(url, n, concurrency, "sdk", Weather()),
                "ours_threaded": lambda n=n: ours(url, n, concurrency, "sdk", BlockingWeather()),
                "ours_lean": lambda n=n: ours(url, n, concurrency, "lean", Weather()),
            }
            load = _load()
            runs = _interleaved(variants, repeats, pid)
            best = _best(runs)
            calls = n * TOOL_TURNS
            row = _setup(delay_ms, n, concurrency, calls, repeats, load, ideal)
            for name in ("ours", "ours_threaded", "ours_lean"):
                row.update(_versus(runs, name, "bare"))
            row.update(
                {
                    **{f"{k}_calls_per_s": round(calls / b[0], 1) for k, b in best.items()},
                    **{
                        f"{k}_fraction_of_ideal": round(calls / b[0] / ideal, 3)
                        for k, b in best.items()
                    },
                    **{
                        f"{k}_cpu_ms_per_call": round(min(r[1] for r in v) / calls * 1000, 3)
                        for k, v in runs.items()
                    },
                    "wall_s": {k: [round(r[0], 3) for r in v] for k, v in runs.items()},
                    "cpu_ms_per_call": {
                        k: [round(r[1] / calls * 1000, 3) for r in v] for k, v in runs.items()
                    },
                }
            )
            results.append(row)
    return results


def bench_lean(delay_ms: float, n: int, concurrency: int, repeats: int) -> dict[str, Any]:
    ideal = concurrency / (delay_ms / 1000.0)
    calls = n * TOOL_TURNS
    with _server(delay_ms) as server:
        url, pid = server.base_url, server._proc.pid if server._proc else None
        asyncio.run(bare_loop(url, 32, 32))
        ours(url, 32, 32, "sdk", Weather())
        ours(url, 32, 32, "lean", Weather())
        load = _load()
        runs = _interleaved(
            {
                "bare_sdk": lambda: asyncio.run(bare_loop(url, n, concurrency)),
                "ours_sdk": lambda: ours(url, n, concurrency, "sdk", Weather()),
                "ours_lean": lambda: ours(url, n, concurrency, "lean", Weather()),
            },
            repeats,
            pid,
        )
    best = _best(runs)
    cpu = {k: min(r[1] for r in v) / calls * 1000 for k, v in runs.items()}
    rate = {k: calls / b[0] for k, b in best.items()}
    return {
        **_setup(delay_ms, n, concurrency, calls, repeats, load, ideal),
        **{f"{k}_calls_per_s": round(v, 1) for k, v in rate.items()},
        **{f"{k}_fraction_of_ideal": round(v / ideal, 3) for k, v in rate.items()},
        **{f"{k}_cpu_ms_per_call": round(v, 3) for k, v in cpu.items()},
        "lean_cpu_vs_sdk_cpu": round(cpu["ours_lean"] / cpu["ours_sdk"], 3),
        "lean_cpu_vs_bare_sdk_cpu": round(cpu["ours_lean"] / cpu["bare_sdk"], 3),
        "lean_throughput_vs_bare_sdk": round(rate["ours_lean"] / rate["bare_sdk"], 3),
        "lean_throughput_vs_bare_sdk_median_round": _versus(runs, "ours_lean", "bare_sdk")[
            "ours_lean_vs_bare_sdk_median_round"
        ],
        "server_cpu_ms_per_call": {
            k: None if b[2] is None else round(b[2] / calls * 1000, 3) for k, b in best.items()
        },
        "wall_s": {k: [round(r[0], 3) for r in v] for k, v in runs.items()},
        "cpu_ms_per_call": {k: [round(r[1] / calls * 1000, 3) for r in v] for k, v in runs.items()},
    }


def bench_scale(
    delay_ms: float, n: int, concurrency: int, repeats: int, workers: int = 2
) -> dict[str, Any]:
    """``APIMultiTurnRollout.remote`` actors splitting one batch: 1 worker vs ``workers``,
    over each transport."""
    import ray

    from twinkle.protocol.openai import OpenAI
    from twinkle.rollout import APIMultiTurnRollout
    from twinkle.tools import ToolManager

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    calls = n * TOOL_TURNS
    result: dict[str, Any] = {
        "delay_ms": delay_ms,
        "trajectories": n,
        "model_calls": calls,
        "concurrency_per_worker": concurrency,
        "ideal_calls_per_s_per_worker": round(concurrency / (delay_ms / 1000.0), 1),
        "workers": workers,
        "repeats": repeats,
        "cpus": os.cpu_count(),
    }
    # A cluster of its own: never join one that another process started on this machine.
    ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        with _server(delay_ms) as server:
            for transport in ("sdk", "lean"):
                actors = [
                    APIMultiTurnRollout.remote(
                        OpenAI("m", api_key="x", base_url=server.base_url, transport=transport),
                        ToolManager({"get_weather": Weather()}),
                        max_turns=TOOL_TURNS + 1,
                        concurrency=concurrency,
                    )
                    for _ in range(workers)
                ]
                ray.get([a.__call__.remote(prompts(32)) for a in actors], timeout=300)  # warm

                def run(k: int, actors: list[Any] = actors) -> None:
                    batch = prompts(n)
                    shares = [batch[i::k] for i in range(k)]
                    refs = [a.__call__.remote(s) for a, s in zip(actors[:k], shares)]
                    check([o for out in ray.get(refs, timeout=600) for o in out], n)

                variants = {f"{k}": (lambda k=k: run(k)) for k in (1, workers)}
                load = _load()
                runs = _interleaved(variants, repeats, None)
                best = _best(runs)
                rate = {k: calls / b[0] for k, b in best.items()}
                result[transport] = {
                    "load_average_1m": [load, _load()],
                    **{f"{k}_workers_calls_per_s": round(v, 1) for k, v in rate.items()},
                    "speedup": round(rate[str(workers)] / rate["1"], 3),
                    "per_worker_calls_per_s": round(rate[str(workers)] / workers, 1),
                    "per_worker_trajectories_per_s": round(
                        rate[str(workers)] / workers / TOOL_TURNS, 1
                    ),
                    "wall_s": {k: [round(r[0], 3) for r in v] for k, v in runs.items()},
                }
                for actor in actors:
                    ray.kill(actor)
    finally:
        ray.shutdown()
    return result
