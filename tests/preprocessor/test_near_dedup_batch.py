"""NearDedupFilter's batched numpy MinHash equals datasketch's, and so do its clusters."""

from __future__ import annotations

import numpy as np
from datasketch import LeanMinHash, MinHash, MinHashLSH

from twinkle.preprocessor.dedup_filter import NearDedupFilter, conversation_text
from twinkle.synthetic import generate


def _rows():
    rows = generate(120, seed=5, defects=True, defect_rate=0.3, target_bytes=4096)
    extra = []
    for i, r in enumerate(rows[:40]):  # near copies: a word changed or appended
        msgs = [dict(m) for m in r["messages"]]
        for m in msgs[::-1]:
            if m.get("role") == "assistant" and isinstance(m.get("content"), str):
                m["content"] = m["content"] + (" ok" if i % 2 else " (edited)")
                break
        extra.append({"id": f"near{i}", "messages": msgs})
    return rows + extra + [{"id": "empty", "messages": [{"role": "user", "content": "!!"}]}]


def _datasketch_reference(f: NearDedupFilter, rows):
    """The per-row datasketch implementation NearDedupFilter used before batching."""
    template = MinHash(num_perm=f.num_perm, seed=f.seed, scheme="affine32")
    lsh = MinHashLSH(threshold=f.threshold, num_perm=f.num_perm, weights=(0.05, 0.95))
    entries = []
    for i, row in enumerate(rows):
        text = conversation_text(row["messages"])
        sh = f.shingle_hashes(text)
        mh = None
        if len(sh):
            m = MinHash(
                num_perm=f.num_perm, seed=f.seed, hashfunc=int,
                permutations=template.permutations, scheme="affine32",
            )  # fmt: skip
            m.update_batch(sh.tolist())
            mh = LeanMinHash(m)
        entries.append((len(row["messages"]), len(text), i, mh))
    store, keep = {}, []
    for _, _, i, mh in sorted(entries, key=lambda e: (-e[0], -e[1], e[2])):
        if mh is not None:
            if any(store[k].jaccard(mh) >= f.threshold for k in lsh.query(mh)):
                continue
            lsh.insert(i, mh)
            store[i] = mh
        keep.append(i)
    return sorted(keep), {i: e[3] for i, e in enumerate(entries)}


def test_batched_signatures_equal_datasketch():
    rows = _rows()
    f = NearDedupFilter()
    keys, sigs, has, bad = f.sketch(rows)
    assert not bad and has.sum() == len(rows) - 1
    _, ref = _datasketch_reference(f, rows)
    for k, pos in enumerate(keys[:, 2].tolist()):
        if ref[pos] is None:
            assert not has[k]
        else:
            assert np.array_equal(sigs[k], ref[pos].hashvalues)


def test_same_clusters_as_the_per_row_datasketch_filter():
    rows = _rows()
    for threshold in (0.5, 0.8, 0.95):
        f = NearDedupFilter(threshold=threshold)
        kept, dropped = f(rows)
        ref_keep, _ = _datasketch_reference(f, rows)
        assert [r["id"] for r in kept] == [rows[i]["id"] for i in ref_keep]
        assert len(kept) + len(dropped) == len(rows)
    assert len(ref_keep) < len(rows)  # the set really has near duplicates
