"""Curation at scale: streaming against the in-memory path, near-dedup rate, Ray against local.

Prints one JSON object (``bench/curation.py --stream ROWS`` runs it too):

- ``stream`` / ``memory``: ``twinkle curate`` (default chain) on ``--rows`` agent rows of
  about 4.7 KB (JSONL in a temporary folder, deleted afterwards), as a fresh process: peak
  RSS, wall seconds, rows/s, and the exact-dedup step's own CPU seconds. ``memory`` is the
  in-memory path (``curate_rows`` on the loaded rows, what ``twinkle curate`` did before).
  ``--rows`` may list several sizes: the RSS growth between them shows what grows with the
  input (``rss_growth_mb_per_100k_rows``).
- ``near_dedup``: ``NearDedupFilter`` CPU seconds and MB/s per core on ``--near-rows`` rows
  (text MB: the user and assistant text it shingles).
- ``ray`` (``--ray``): the same chain on a local Ray cluster (a head and two worker nodes,
  one CPU each, started with ``ray start`` in a private temp dir and stopped afterwards)
  against the single-process stream, same kept rows, and the throughput ratio.

Usage: ``python bench/curation_scale.py --rows 50000 100000 [--ray]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import shutil
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


def bench_ray(src: Path, tmp: Path, stream: dict[str, Any]) -> dict[str, Any]:
    """The default chain on a head (no CPU) and two 1-CPU worker nodes, as separate
    processes; the wall time includes connecting, not starting the cluster."""
    from twinkle.testing.ray_local import LocalRayCluster

    out = tmp / "out-ray.jsonl"
    with LocalRayCluster(workers=2, cpus=1, head_cpus=0, object_store_mb=1024) as cluster:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "twinkle", "curate", str(src), "-o", str(out), "-q",
             "--ray-address", cluster.address],
            env=cluster.env, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        wall = time.perf_counter() - t0
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    rows_per_s = stream["rows_in"] / wall
    return {
        "workers": 2,
        "wall_s": round(wall, 1),
        "rows_per_s": round(rows_per_s),
        "same_kept_rows": out.read_bytes() == (tmp / "out-stream.jsonl").read_bytes(),
        "throughput_vs_single_process_stream": round(rows_per_s / stream["rows_per_s"], 2),
    }


def main() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[50_000, 100_000])
    p.add_argument("--near-rows", type=int, default=2000)
    p.add_argument("--memory", action="store_true", help="also run the in-memory path")
    p.add_argument("--ray", action="store_true", help="also run on a local 3-node Ray cluster")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        mode, src, out = args.child
        res = (_child_memory if mode == "memory" else _child_stream)(src, out)
        res["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
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
                entry["ray"] = bench_ray(src, tmp, entry["stream"])
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
        result["near_dedup"] = bench_near(args.near_rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
