"""NearDedupFilter must catch pairs whose true Jaccard is well above the threshold.

LSH banding is an S-curve around the threshold; with datasketch's default (equal) weights a
Japanese pair at true Jaccard 0.91 was never even a candidate. This pins that pair.
"""

from twinkle.preprocessor.dedup_filter import NearDedupFilter, conversation_text
from twinkle.synthetic import generate


def test_japanese_near_duplicate_well_above_threshold_is_caught():
    rows = {
        r["id"]: r for r in generate(19, seed=3, defects=True, defect_rate=0.35, target_bytes=4096)
    }
    a, b = rows["syn-3-000006"], rows["syn-3-000018"]
    f = NearDedupFilter(threshold=0.8)
    sa, sb = (set(f.shingle_hashes(conversation_text(r["messages"])).tolist()) for r in (a, b))
    assert len(sa & sb) / len(sa | sb) > 0.88  # the pair really is a near duplicate
    kept, dropped = f([a, b])
    assert [r["id"] for r in kept] == ["syn-3-000018"]  # the longer copy survives
    assert [(d["id"], d["drop_reason"]) for d in dropped] == [("syn-3-000006", "near_duplicate")]
