"""What a synthetic row is labelled with: language, defect type, and the filter meant to catch it.

Example:
    >>> DEFECT_TARGETS["refusal"]
    'RefuseFilter'
    >>> label_of({"user_data": [["synthetic_defect", '"refusal"']]})["defect"]
    'refusal'
"""

from __future__ import annotations

from typing import Any

from twinkle.data_format import user_data_get

LANGS = ("en", "zh", "ja", "ko")
DEFECTS = (
    "exact_duplicate",
    "near_duplicate",
    "dead_loop",
    "refusal",
    "token_soup",
    "trivial_greeting",
    "round_too_long",
)
#: Which curation filter is meant to catch each defect.
DEFECT_TARGETS = {
    "exact_duplicate": "DedupFilter",
    "near_duplicate": "NearDedupFilter",
    "dead_loop": "DeadLoopFilter",
    "refusal": "RefuseFilter",
    "token_soup": "TokenSoupFilter",
    "trivial_greeting": "HardFilter",
    "round_too_long": "HardFilter",
}


def label_of(row: dict[str, Any]) -> dict[str, Any]:
    """The synthetic labels of a row: ``defect``, ``variant``, ``lang``, ``agent``, ``dup_of``.

    Rows without labels read as clean.

    Example:
        >>> label_of({"messages": []})
        {'defect': 'none', 'variant': '', 'lang': '', 'agent': False, 'dup_of': None}
    """
    ud = row.get("user_data") if isinstance(row, dict) else None
    return {
        "defect": user_data_get(ud, "synthetic_defect", "none"),
        "variant": user_data_get(ud, "synthetic_variant", ""),
        "lang": user_data_get(ud, "synthetic_lang", ""),
        "agent": bool(user_data_get(ud, "synthetic_agent", False)),
        "dup_of": user_data_get(ud, "synthetic_dup_of", None),
    }
