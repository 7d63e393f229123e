"""Benchmark the local sandbox server through the real e2b SDK, against plain baselines.

Measures, in one process:
  * sandbox create latency (``Sandbox.create``), p50/p99; target p50 < 20 ms;
  * ``python -c "print(1+1)"`` through ``commands.run``, p50/p99; target p50 < 30 ms;
  * the same as the first command of a fresh sandbox (its init, cgroups and tmpfs mounts
    new); target p50 within 1.5x of the bare bubblewrap baseline below;
  * baselines for the same command: a plain ``subprocess.run`` and a bare bubblewrap spawn
    per command with the sandbox's own mounts and namespaces (no HTTP, no SDK; what the
    server did per command before each sandbox got one long-lived init), so the overhead
    ratios are printed;
  * N sandboxes alive at once (``AsyncSandbox``, created concurrently), each running a
    command: failures, sandboxes/s created, command p50/p99 under that load.

The server runs in-process (as the Prefect flow runs it, sharing the GIL with the client)
and, for create and the command, also as ``twinkle sandbox serve`` in its own process.
Prints one JSON object. ``--quick`` runs a small version (16 concurrent, fewer samples).

    .venv/bin/python bench/sandbox.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from twinkle.sandbox import SandboxServer

COMMAND = 'python -c "print(1+1)"'
OUT = "2\n"  # COMMAND's output: every timed run is checked for it, outside the timing


def pct(samples: list[float], q: float) -> float:
    """The q-quantile in milliseconds (nearest rank)."""
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": pct(samples, 0.5),
        "p99_ms": pct(samples, 0.99),
        "mean_ms": round(statistics.mean(samples) * 1000, 2),
        "n": len(samples),
    }


def timed(fn, n: int, ok=None) -> list[float]:
    """``n`` wall times of ``fn()``; raises when ``ok(result)`` (checked after timing) is false."""
    out = []
    for _ in range(n):
        start = time.perf_counter()
        result = fn()
        out.append(time.perf_counter() - start)
        if ok is not None and not ok(result):  # a wrong result is not a time of the work
            raise RuntimeError(f"wrong result: {result!r}"[:300])
    return out


def stdout_is(expected: str):
    """``ok`` for ``timed``: a command result (SDK or subprocess) whose stdout is ``expected``."""
    return lambda r: (r.stdout.decode() if isinstance(r.stdout, bytes) else r.stdout) == expected


def bare_bwrap(argv: list[str], env: dict[str, str], kwargs: dict) -> subprocess.CompletedProcess:
    """Run bubblewrap's argv once, opening its ``{file:PATH}`` arguments as the server does."""
    fds = []
    args = []
    for arg in argv:
        if arg.startswith("{file:"):
            fds.append(os.open(arg[6:-1], os.O_RDONLY))
            arg = str(fds[-1])
        args.append(arg)
    try:
        return subprocess.run(
            args, capture_output=True, check=True, env=env, pass_fds=fds, **kwargs
        )
    finally:
        for fd in fds:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run for development")
    args = parser.parse_args()
    n = 15 if args.quick else 100
    concurrent = 16 if args.quick else 64

    from e2b import AsyncSandbox, Sandbox

    python3 = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
    with SandboxServer(port=0, api_key="bench") as srv:
        kw = srv.sdk_kwargs()
        warm = Sandbox.create(timeout=600, **kw)
        for _ in range(3):
            warm.commands.run(COMMAND)

        created: list = []
        create = timed(lambda: created.append(Sandbox.create(timeout=600, **kw)), n)
        kill = timed(lambda: created.pop().kill(), n, ok=lambda killed: killed is True)
        # The first command of a fresh sandbox: its init, cgroups and tmpfs mounts are new.
        first = []
        for _ in range(n):
            box = Sandbox.create(timeout=600, **kw)
            first += timed(lambda box=box: box.commands.run(COMMAND), 1, stdout_is(OUT))
            box.kill()
        run_true = timed(lambda: warm.commands.run("true"), n, stdout_is(""))
        files = timed(
            lambda: (
                warm.files.write("/home/user/b.txt", "x" * 1024),
                warm.files.read("/home/user/b.txt"),
            ),
            n,
            lambda r: r[1] == "x" * 1024,
        )

        # The command through the SDK and its baselines, interleaved so that load from
        # other processes on the machine hits all three alike: the same command as a plain
        # subprocess, and bubblewrap with the server's own argv but no HTTP, SDK or loop.
        state = srv.manager.sandboxes[warm.sandbox_id]
        argv = []
        if srv.isolated:  # the sandbox's own bubblewrap mounts and namespaces, one per command
            init = srv.isolation.init_argv(state.template, state.directory, state.network)
            argv = [*init[: init.index("--")], "--", "/bin/bash", "-l", "-c", COMMAND]
        env = {"PATH": "/usr/bin:/bin", "HOME": "/home/user"}
        run, plain, bwrap = [], [], []
        for _ in range(n):
            run += timed(lambda: warm.commands.run(COMMAND), 1, stdout_is(OUT))
            plain += timed(
                lambda: subprocess.run(
                    [python3, "-c", "print(1+1)"], capture_output=True, check=True
                ),
                1,
                stdout_is(OUT),
            )
            if srv.isolated:
                bwrap += timed(
                    lambda: bare_bwrap(argv, env, srv.isolation.spawn_kwargs()), 1, stdout_is(OUT)
                )

        # Many sandboxes alive at once, each running a command.
        async def fleet() -> dict:
            start = time.perf_counter()
            results = await asyncio.gather(
                *(AsyncSandbox.create(timeout=600, **kw) for _ in range(concurrent)),
                return_exceptions=True,
            )
            create_wall = time.perf_counter() - start
            boxes = [r for r in results if not isinstance(r, BaseException)]
            alive = len(srv.manager.sandboxes)

            async def one(box) -> float:
                t0 = time.perf_counter()
                res = await box.commands.run(COMMAND)
                assert res.stdout == OUT
                return time.perf_counter() - t0

            start = time.perf_counter()
            runs = await asyncio.gather(*(one(b) for b in boxes), return_exceptions=True)
            run_wall = time.perf_counter() - start
            await asyncio.gather(*(b.kill() for b in boxes), return_exceptions=True)
            ok = [r for r in runs if isinstance(r, float)]
            return {
                "sandboxes": concurrent,
                "alive_at_once": alive - 1,
                "create_failures": concurrent - len(boxes),
                "command_failures": len(boxes) - len(ok),
                "sandboxes_per_s": round(len(boxes) / create_wall, 1),
                "create_wall_s": round(create_wall, 3),
                "commands_wall_s": round(run_wall, 3),
                "commands_per_s": round(len(ok) / run_wall, 1) if ok else 0.0,
                "command_under_load": summary(ok) if ok else {},
            }

        concurrency = asyncio.run(fleet())
        warm.kill()
        isolated = srv.isolated
        limits = srv.limits()

    # The same through `twinkle sandbox serve` in its own process, as deployed: no GIL shared
    # between the SDK client and the server.
    serve = subprocess.Popen(
        [sys.executable, "-m", "twinkle", "sandbox", "serve", "--port", "0", "--api-key", "bench"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = serve.stdout.readline().strip()
        remote = {"api_url": url, "sandbox_url": url, "api_key": "bench"}
        box = Sandbox.create(timeout=600, **remote)
        box.commands.run(COMMAND)
        served = {
            "create": summary(timed(lambda: Sandbox.create(timeout=600, **remote), n)),
            "command_python": summary(timed(lambda: box.commands.run(COMMAND), n, stdout_is(OUT))),
        }
    finally:
        serve.terminate()
        serve.wait(timeout=30)

    out = {
        "benchmark": "sandbox",
        "load_average_1m": round(
            os.getloadavg()[0], 2
        ),  # other work on the machine skews all times
        "quick": args.quick,
        "isolated": isolated,
        "create": summary(create),
        "kill": summary(kill),
        "command_python": summary(run),
        "first_command_python": summary(first),
        "command_true": summary(run_true),
        "files_write_read_1k": summary(files),
        "baseline_plain_subprocess": summary(plain),
        "baseline_bwrap_no_server": summary(bwrap) if bwrap else None,
        "overhead_vs_plain_subprocess": round(statistics.median(run) / statistics.median(plain), 2),
        "overhead_vs_bwrap": round(statistics.median(run) / statistics.median(bwrap), 2)
        if bwrap
        else None,
        "first_command_vs_bwrap": round(statistics.median(first) / statistics.median(bwrap), 2)
        if bwrap
        else None,
        "limits": limits,
        "concurrency": concurrency,
        "server_in_own_process": served,
        "targets": {
            "create_p50_under_20ms": pct(create, 0.5) < 20,
            "python_command_p50_under_30ms": pct(run, 0.5) < 30,
            "first_command_p50_within_1.5x_bwrap": bool(bwrap)
            and statistics.median(first) <= 1.5 * statistics.median(bwrap),
            f"{concurrent}_alive_no_failure": concurrency["alive_at_once"] == concurrent
            and concurrency["create_failures"] == 0
            and concurrency["command_failures"] == 0,
        },
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
