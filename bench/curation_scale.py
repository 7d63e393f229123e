"""Curation at scale: streaming against the in-memory path, near-dedup rate, Ray against local.

Prints one JSON object (``bench/curation.py --stream ROWS`` runs it too):

- ``stream`` / ``memory``: ``twinkle curate`` (default chain) on ``--rows`` agent rows of
  about 4.7 KB (JSONL in a temporary folder, deleted afterwards), as a fresh process: peak
  RSS, wall and CPU seconds, rows/s, and the exact-dedup step's own CPU seconds. ``memory`` is the
  in-memory path (``curate_rows`` on the loaded rows, what ``twinkle curate`` did before).
  ``--rows`` may list several sizes: the RSS growth between them shows what grows with the
  input (``rss_growth_mb_per_100k_rows``).
- ``near_dedup``: ``NearDedupFilter`` CPU seconds and MB/s per core on ``--near-rows`` rows
  (text MB: the user and assistant text it shingles).
- ``ray`` (``--ray``): the same chain on a local Ray cluster (a head and two worker nodes,
  one CPU each, started with ``ray start`` in a private temp dir and stopped afterwards)
  against the single-process stream, interleaved over ``--rounds``: same kept rows, the
  throughput ratio (best and median), the fixed cost (a 2,000-row run), the rate after it,
  and the rows per second of task time (per worker) from the completion markers. The
  machine's load average is printed before and after: the cores are shared.

Usage: ``python bench/curation_scale.py --rows 50000 100000 [--ray] [--no-near]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_input(path: Path, n: int, seed: int = 3) -> int:
    """``n`` agent rows of ~4.7 KB: 5,000 synthetic bases made distinct, one in ten an exact
    copy of an earlier row. Returns the bytes written."""
    from twinkle.synthetic import generate

    base = generate(min(n, 5000), seed=seed, defects=True, defect_rate=0.2, target_bytes=3000)
    rng = random.Random(seed)
    recent: list[list[Any]] = []
    with open(path, "wb") as f:
        for i in range(n):
            if recent and rng.random() < 0.1:
                msgs = rng.choice(recent)
            else:
                msgs = copy.deepcopy(base[i % len(base)]["messages"])
                for m in msgs:
                    if m.get("role") == "user" and isinstance(m.get("content"), str):
                        m["content"] = f"[task {i}] " + m["content"]
                        break
                recent.append(msgs)
                if len(recent) > 2000:
                    recent.pop(0)
            f.write(orjson.dumps({"id": f"r{i}", "messages": msgs}) + b"\n")
    return path.stat().st_size


def _child_memory(src: str, out: str) -> dict[str, Any]:
    """The in-memory path, as ``twinkle curate`` ran before streaming."""
    from twinkle.io import read_rows, write_rows
    from twinkle.preprocessor.chain import build_pipeline, curate_rows

    rows = list(read_rows(src))
    kept, stats = curate_rows(rows, build_pipeline())
    write_rows(out, kept)
    return {"rows_in": len(rows), "rows_out": len(kept), "dedup_s": _dedup_s(stats)}


def _child_stream(src: str, out: str) -> dict[str, Any]:
    from twinkle.preprocessor.stream import curate_stream

    s = curate_stream(src, out, progress=False)
    return {"rows_in": s.rows_in, "rows_out": s.rows_out, "dedup_s": _dedup_s(s.stats)}


def _dedup_s(stats: Any) -> float | None:
    step = stats.steps.get("DedupFilter")
    return round(step.seconds, 2) if step else None


def run_child(mode: str, src: Path, out: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["rows_per_s"] = round(res["rows_in"] / res["wall_s"])
    return res


def bench_near(n: int) -> dict[str, Any]:
    from twinkle.preprocessor.dedup_filter import NearDedupFilter, conversation_text
    from twinkle.synthetic import generate

    rows = generate(n, seed=9, defects=False, target_bytes=4096)
    mb = sum(len(conversation_text(r["messages"]).encode()) for r in rows) / 1e6
    f = NearDedupFilter()
    c0 = time.process_time()
    kept, _ = f(rows)
    cpu = time.process_time() - c0
    return {
        "rows": n,
        "text_mb": round(mb, 2),
        "cpu_s": round(cpu, 2),
        "mb_per_s_per_core": round(mb / cpu, 2),
        "kept": len(kept),
    }


def _curate(src: Path, out: Path, env: dict[str, str] | None = None, *extra: str) -> float:
    """Wall seconds of one ``twinkle curate`` process (start-up and import included)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle", "curate", str(src), "-o", str(out), "-q", *extra],
        env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return time.perf_counter() - t0


def _tasks(work: Path) -> dict[str, Any]:
    """Per-task figures from the completion markers of the last pass: rows per second of
    task time (wall, what a worker gave on these shared cores) and of task CPU time (what a
    worker with a core to itself gives: the per-node rate on a real cluster)."""
    marks = [json.loads(p.read_text()) for p in sorted(work.glob("seg0/chunk-*.done"))]
    busy = sum(m["end"] - m["start"] for m in marks)
    span = max(m["end"] for m in marks) - min(m["start"] for m in marks)
    rows = sum(m["read"] for m in marks)
    cpu = sum(m["cpu"] for m in marks)
    return {"tasks": len(marks), "pass_span_s": round(span, 2), "task_s": round(busy, 2),
            "task_cpu_s": round(cpu, 2), "rows_per_task_s": round(rows / busy),
            "rows_per_task_cpu_s": round(rows / cpu)}  # fmt: skip


def bench_ray(src: Path, tmp: Path, rows: int, rounds: int) -> dict[str, Any]:
    """The default chain on a head (no CPU) and two 1-CPU worker nodes, as separate
    processes, interleaved with the single-process stream on the same input; wall times
    include process start-up and connecting, not starting the cluster. A 2,000-row run
    gives the fixed cost; the markers give the busy time of each task (the per-worker rate,
    what a node adds on a real cluster)."""
    from twinkle.testing.ray_local import LocalRayCluster

    small = tmp / "small.jsonl"
    with open(src, "rb") as f, open(small, "wb") as g:
        g.writelines(line for _, line in zip(range(2000), f))
    res: dict[str, Any] = {"workers": 2, "stream_s": [], "ray_s": [], "ray_small_s": [],
                           "stream_small_s": [], "load_before": os.getloadavg()}  # fmt: skip
    same = True
    with LocalRayCluster(workers=2, cpus=1, head_cpus=0, object_store_mb=1024) as cluster:
        ray = ("--ray-address", cluster.address)
        for r in range(rounds):
            work = tmp / f"work-{r}"
            keep = ("--work-dir", str(work), "--resume")  # --resume keeps the markers
            res["stream_s"].append(round(_curate(src, tmp / "out-stream.jsonl"), 2))
            res["ray_s"].append(round(_curate(src, tmp / "out-ray.jsonl", cluster.env, *ray,
                                              *keep), 2))  # fmt: skip
            same &= (tmp / "out-ray.jsonl").read_bytes() == (tmp / "out-stream.jsonl").read_bytes()
            res["tasks"] = _tasks(work)
            shutil.rmtree(work)
            res["stream_small_s"].append(round(_curate(small, tmp / "o.jsonl"), 2))
            res["ray_small_s"].append(round(_curate(small, tmp / "o.jsonl", cluster.env, *ray), 2))
    res["load_after"] = os.getloadavg()
    best = {k: min(res[k]) for k in ("stream_s", "ray_s", "ray_small_s", "stream_small_s")}
    med = {k: statistics.median(res[k]) for k in ("stream_s", "ray_s")}
    res.update(
        same_kept_rows=same,
        stream_rows_per_s=round(rows / best["stream_s"]),
        ray_rows_per_s=round(rows / best["ray_s"]),
        throughput_vs_single_process_stream_best=round(best["stream_s"] / best["ray_s"], 2),
        throughput_vs_single_process_stream_median=round(med["stream_s"] / med["ray_s"], 2),
        ray_fixed_cost_s=best["ray_small_s"],
        stream_fixed_cost_s=best["stream_small_s"],
        ray_rows_per_s_after_fixed_cost=round(
            (rows - 2000) / max(best["ray_s"] - best["ray_small_s"], 1e-9)
        ),
        stream_rows_per_s_after_fixed_cost=round(
            (rows - 2000) / max(best["stream_s"] - best["stream_small_s"], 1e-9)
        ),
    )
    return res


def main() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[50_000, 100_000])
    p.add_argument("--near-rows", type=int, default=2000)
    p.add_argument("--memory", action="store_true", help="also run the in-memory path")
    p.add_argument("--ray", action="store_true", help="also run on a local 3-node Ray cluster")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of Ray vs stream")
    p.add_argument("--no-near", action="store_true", help="skip the near-dedup figure")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        mode, src, out = args.child
        res = (_child_memory if mode == "memory" else _child_stream)(src, out)
        use = resource.getrusage(resource.RUSAGE_SELF)
        res["peak_rss_mb"] = round(use.ru_maxrss / 1024)
        res["cpu_s"] = round(use.ru_utime + use.ru_stime, 1)  # steadier than wall on shared cores
        print(json.dumps(res))
        return
    tmp = Path(tempfile.mkdtemp(prefix="twinkle-scale-", dir="/tmp"))
    result: dict[str, Any] = {"sizes": []}
    try:
        for n in args.rows:
            src = tmp / f"in-{n}.jsonl"
            size = write_input(src, n)
            entry: dict[str, Any] = {"rows": n, "input_mb": round(size / 2**20)}
            entry["stream"] = run_child("stream", src, tmp / "out-stream.jsonl")
            if args.memory:
                entry["memory"] = run_child("memory", src, tmp / "out-memory.jsonl")
                same = (tmp / "out-stream.jsonl").read_bytes() == (
                    tmp / "out-memory.jsonl"
                ).read_bytes()
                entry["same_output"] = same
            if args.ray:
                entry["ray"] = bench_ray(src, tmp, n, args.rounds)
            result["sizes"].append(entry)
            src.unlink()
            for f in tmp.glob("out-*"):
                f.unlink()
        sizes = result["sizes"]
        if len(sizes) > 1:
            a, b = sizes[0], sizes[-1]
            for mode in ("stream", "memory"):
                if mode in a and "peak_rss_mb" in a[mode] and "peak_rss_mb" in b.get(mode, {}):
                    growth = (b[mode]["peak_rss_mb"] - a[mode]["peak_rss_mb"]) / (
                        (b["rows"] - a["rows"]) / 100_000
                    )
                    result[f"{mode}_rss_growth_mb_per_100k_rows"] = round(growth, 1)
        if not args.no_near:
            result["near_dedup"] = bench_near(args.near_rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    check_same(result)
    print(json.dumps(result, indent=1))


def check_same(result: dict[str, Any]) -> None:
    """Refuse to print figures when the compared paths kept different rows (a side that
    did less work is not a faster one)."""
    for entry in result["sizes"]:
        if entry.get("same_output") is False:
            raise RuntimeError(f"{entry['rows']} rows: stream and memory outputs differ")
        if entry.get("ray", {}).get("same_kept_rows") is False:
            raise RuntimeError(f"{entry['rows']} rows: Ray and stream kept different rows")


if __name__ == "__main__":
    main()
