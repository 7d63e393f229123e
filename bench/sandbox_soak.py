"""Soak the sandbox server: N sandboxes, each running mixed commands and file operations for T
seconds through the real e2b SDK, against a ``twinkle sandbox serve`` in its own process.

Counts every error (the figure to reach is 0 for 128 sandboxes x 60 s) and reports the latency
percentiles of successful operations and the server's peak RSS; any error in either run raises
instead of printing the ratio. Then kills a sandbox holding ``--kill-files`` files while
another sandbox runs commands, and reports their p99 (target under 100 ms). The baseline is
the same loop against one sandbox, so the per-operation slowdown under load is printed as a
ratio.

    .venv/bin/python bench/sandbox_soak.py --sandboxes 128 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

OPS = ("echo", "python", "write", "read", "list")


async def worker(box, until: float, k: int, lat: list[float], errors: list[str]) -> int:
    """Operations in a fixed rotation until ``until``; returns how many ran."""
    n = 0
    await box.files.write("/home/user/r.txt", "start")  # "list" looks for it from the start
    while time.perf_counter() < until:
        op = OPS[(k + n) % len(OPS)]
        t0 = time.perf_counter()
        try:
            if op == "echo":
                res = await box.commands.run(f"echo {k}-{n}")
                ok = res.stdout == f"{k}-{n}\n"
            elif op == "python":
                res = await box.commands.run('python3 -c "print(sum(range(1000)))"')
                ok = res.stdout == "499500\n"
            elif op == "write":
                await box.files.write(f"/home/user/f{n % 8}.txt", f"row {k} {n}\n" * 64)
                ok = True
            elif op == "read":
                await box.files.write("/home/user/r.txt", f"{k}:{n}")
                ok = await box.files.read("/home/user/r.txt") == f"{k}:{n}"
            else:
                ok = any(e.name == "r.txt" for e in await box.files.list("/home/user"))
            if ok:  # only successes: a fast failure would pull the percentiles down
                lat.append(time.perf_counter() - t0)
            else:
                errors.append(f"{op}: wrong result")
        except Exception as exc:  # noqa: BLE001 - every failure is the figure being counted
            errors.append(f"{op}: {type(exc).__name__}: {exc}"[:200])
        n += 1
    return n


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def soak(kw: dict, sandboxes: int, seconds: float, pid: int) -> dict:
    from e2b import AsyncSandbox

    created = await asyncio.gather(
        *(AsyncSandbox.create(timeout=int(seconds) + 300, **kw) for _ in range(sandboxes)),
        return_exceptions=True,
    )
    boxes = [b for b in created if not isinstance(b, BaseException)]
    errors = [f"create: {type(b).__name__}: {b}"[:200] for b in created if b not in boxes]
    lat: list[float] = []
    peak = [rss_mb(pid)]

    async def watch(until: float) -> None:
        while time.perf_counter() < until:
            peak.append(rss_mb(pid))
            await asyncio.sleep(0.5)

    until = time.perf_counter() + seconds
    counts = await asyncio.gather(
        watch(until), *(worker(b, until, k, lat, errors) for k, b in enumerate(boxes))
    )
    await asyncio.gather(*(b.kill() for b in boxes), return_exceptions=True)
    lat.sort()
    pick = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 1)) if lat else None
    return {
        "sandboxes": sandboxes,
        "seconds": seconds,
        "operations": sum(c for c in counts if isinstance(c, int)),
        "errors": len(errors),
        "first_errors": errors[:5],
        "op_ms_p50": pick(0.5) if pick else None,
        "op_ms_p99": pick(0.99) if pick else None,
        "server_peak_rss_mb": round(max(peak), 1),
    }


async def kill_stall(kw: dict, files: int) -> dict:
    """Another sandbox's command latency while a sandbox holding ``files`` files is killed."""
    from e2b import AsyncSandbox

    big = await AsyncSandbox.create(timeout=600, **kw)
    other = await AsyncSandbox.create(timeout=600, **kw)
    per_dir = 1000
    make = (
        "import os\n"
        f"for d in range({max(1, files // per_dir)}):\n"
        "    os.makedirs(f'/home/user/many/{d}')\n"
        f"    for f in range({per_dir}):\n"
        "        open(f'/home/user/many/{d}/{f}', 'w').close()\n"
    )
    await big.files.write("/home/user/make.py", make)
    await big.commands.run("python3 /home/user/make.py", timeout=600)
    await other.commands.run("echo warm")
    times: list[float] = []

    async def probe() -> None:
        for _ in range(100):
            t0 = time.perf_counter()
            await other.commands.run("echo ok")
            times.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    killer = asyncio.create_task(big.kill())
    await probe()
    await killer
    kill_s = time.perf_counter() - t0
    await other.kill()
    times.sort()
    return {
        "files": files,
        "kill_and_probes_s": round(kill_s, 3),
        "other_command_ms_p50": round(times[len(times) // 2] * 1000, 1),
        "other_command_ms_p99": round(times[min(len(times) - 1, int(0.99 * len(times)))] * 1000, 1),
        "target_p99_under_100ms": times[min(len(times) - 1, int(0.99 * len(times)))] < 0.1,
    }


def require_clean(baseline: dict, loaded: dict) -> None:
    """Refuse the ratio unless both runs did only successful work."""
    if baseline["errors"] or loaded["errors"]:
        first = (baseline["first_errors"] + loaded["first_errors"])[:1]
        raise RuntimeError(
            f"errors: baseline {baseline['errors']}, loaded {loaded['errors']}; first: {first}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--kill-files", type=int, default=200_000, help="0 skips the kill part")
    args = parser.parse_args()
    serve = subprocess.Popen(
        [sys.executable, "-m", "twinkle", "sandbox", "serve", "--port", "0", "--api-key", "soak"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = serve.stdout.readline().strip()
        kw = {"api_url": url, "sandbox_url": url, "api_key": "soak"}
        baseline = asyncio.run(soak(kw, 1, min(10.0, args.seconds), serve.pid))
        loaded = asyncio.run(soak(kw, args.sandboxes, args.seconds, serve.pid))
        stall = asyncio.run(kill_stall(kw, args.kill_files)) if args.kill_files else None
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    require_clean(baseline, loaded)  # a failed operation is not a latency sample
    p50 = (loaded["op_ms_p50"] or 0) / max(baseline["op_ms_p50"] or 1e-9, 1e-9)
    print(
        json.dumps(
            {
                "benchmark": "sandbox_soak",
                "load_average_1m": round(os.getloadavg()[0], 2),
                "baseline_one_sandbox": baseline,
                "soak": loaded,
                "op_p50_vs_one_sandbox": round(p50, 2),
                "target_zero_errors": loaded["errors"] == 0,
                "kill_stall": stall,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
