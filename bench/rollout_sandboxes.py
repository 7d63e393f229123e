"""Sandboxes on demand: a replay rollout of many agent rows against a sandbox server that
allows far fewer live sandboxes than there are rows.

``RolloutRunner`` creates each trajectory's sandbox when the trajectory starts and kills it
when it ends, so live sandboxes never outnumber the rollout's concurrency. Here: the bundled
agent conversations (``examples/conversations.jsonl``) repeated to ``--rows`` rows with
distinct ids, rolled out by the replay policy at ``--concurrency``, against
``twinkle sandbox serve``'s ``SandboxServer`` with ``max_sandboxes=--max-sandboxes`` in a
child process (as the flows run it: no GIL shared with the rollout). The live count is
polled from the server's ``/health`` (its ``sandboxes`` figure) every 10 ms.

Reported: seconds, successful trajectories/s, failures, the peak live sandbox count, the sum
of time spent creating and killing sandboxes (``provision_s``, over all trajectories).

Measured on 2 shared cores, 5,000 rows, ``max_sandboxes=64``: concurrency 64, 159 s
(31 trajectories/s), peak 64 live, 0 failed; concurrency 16, 123 s (40/s), peak 16, 0
failed. Creating every sandbox up front (the runner before) fails 36 of just 100 rows
there ("too many sandboxes (max 64)").

    .venv/bin/python bench/rollout_sandboxes.py                 # 5,000 rows, 64 / 64
    .venv/bin/python bench/rollout_sandboxes.py --rows 500 --concurrency 16
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "conversations.jsonl"

SERVER = (
    "import sys; from twinkle.sandbox import SandboxServer; "
    "s = SandboxServer(port=0, api_key=sys.argv[1], max_sandboxes=int(sys.argv[2])).start(); "
    "print(s.url, flush=True); s.serve_forever()"
)


def agent_rows(n: int) -> list[dict]:
    """``n`` recorded agent conversations, the bundled ones repeated with distinct ids."""
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    agent = [r for r in rows if any(m.get("tool_calls") for m in r["messages"])]
    return [{**agent[k % len(agent)], "id": f"{agent[k % len(agent)]['id']}-{k}"} for k in range(n)]


def succeeded(result, rows: int) -> int:
    """Trajectories that succeeded: a failed one is no work done, so no throughput."""
    if len(result.trajectories) != rows:  # the runner must return one trajectory per row
        raise RuntimeError(f"{len(result.trajectories)} trajectories for {rows} rows")
    return rows - result.stats.failed


def run(rows: int, concurrency: int, max_sandboxes: int) -> dict:
    import httpx

    from twinkle.rollout.runner import RolloutConfig, RolloutRunner

    key = secrets.token_urlsafe(16)
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, key, str(max_sandboxes)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        peak, stop = [0], threading.Event()

        def watch() -> None:
            with httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=5) as client:
                while not stop.is_set():
                    peak[0] = max(peak[0], client.get("/health").json()["sandboxes"])
                    time.sleep(0.01)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        batch = agent_rows(rows)
        runner = RolloutRunner(
            RolloutConfig(concurrency=concurrency), {"api_url": url, "api_key": key}
        )
        started = time.perf_counter()
        result = runner.run(batch)
        seconds = time.perf_counter() - started
        stop.set()
        watcher.join()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    stats = result.stats
    return {
        "rows": rows,
        "concurrency": concurrency,
        "max_sandboxes": max_sandboxes,
        "seconds": round(seconds, 1),
        "trajectories_per_s": round(succeeded(result, rows) / seconds, 1),
        "failed": stats.failed,
        "errors": stats.errors,
        "stop_reasons": stats.stop_reasons,
        "peak_live_sandboxes": peak[0],
        "provision_s_summed": round(stats.provision_s, 1),
        "ok": stats.failed == 0 and peak[0] <= min(concurrency, max_sandboxes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-sandboxes", type=int, default=64)
    args = parser.parse_args()
    print(json.dumps(run(args.rows, args.concurrency, args.max_sandboxes), indent=2))


if __name__ == "__main__":
    main()
