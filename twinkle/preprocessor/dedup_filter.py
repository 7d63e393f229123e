"""Global conversation dedup: ``DedupFilter`` (exact) and ``NearDedupFilter`` (MinHash LSH).

Both are *global*: they must see the whole dataset in one call, so they run before (or
after) the per-batch ``QualityPreprocessor``, never inside a batched ``datasets.map``.
Both keep the longest copy of each group (most messages, then most text characters) and
break remaining ties by input order, so the result is deterministic.

``DedupFilter`` hashes a signature (head and tail of the first real user turn, head and
tail of the first assistant reply after it) with xxhash's XXH3 (64-bit, several GB/s) and
groups with numpy: the only per-row state is the hash, the message count and the row index
in typed arrays (20 bytes a row, no strings kept), and one ``lexsort`` finds every group's
winner. That is smaller than a dict keyed by signature (about 100 bytes per entry) even
when every row is distinct, and it makes 1M rows take a few seconds on one core.

``NearDedupFilter`` uses datasketch's ``MinHash`` (affine32 scheme, shared permutations)
and ``MinHashLSH`` index, a well-kept library whose LSH banding is tuned from the Jaccard
``threshold`` itself. Shingles are n-grams of word tokens where every CJK character counts
as one token, so Chinese, Japanese and Korean text without spaces shingles as well as
English. Each token is hashed once (XXH32) and numpy folds neighbouring token hashes into
shingle hashes, which is about twice as fast as hashing every n-gram string. Signatures
are computed for a batch of rows at once (``minhash_batch``: one numpy mix of every shingle,
then one permute-and-min per row), the same values as datasketch's ``MinHash`` without an
object per row (4 KB rows of random words: 12 MB/s per core, against 7.6 with a MinHash
per row; synthetic agent rows, ``bench/curation_scale.py``: 5 MB/s). Candidates from the
index are confirmed by their estimated Jaccard before a row is dropped. ``sketch`` and
``select`` split the work so the streaming and Ray paths make the same decisions.

Drop reasons: ``duplicate`` (exact signature), ``near_duplicate`` (Jaccard >= threshold),
and the shared ``malformed_row`` / ``malformed_messages`` / ``malformed_empty_messages``.
"""

from __future__ import annotations

import gc
import json
import re
from array import array
from typing import Any

import numpy as np
import xxhash

from twinkle.data_format import message_text, normalize_tool_calls
from twinkle.preprocessor.base import Row, drop, malformed_reason, map_col_to_row

DUPLICATE = "duplicate"
NEAR_DUPLICATE = "near_duplicate"

# User turns that are really injected context (agent frameworks put these in user role).
_INJECTED_RE = re.compile(
    r"<(?:system[-_]reminder|context|user_info|attached_files)[ >]", re.IGNORECASE
)


def head_tail(text: str, n: int) -> str:
    """The stripped text if it has at most ``2n`` characters, else its first and last ``n``."""
    text = text.strip()
    return text if len(text) <= 2 * n else text[:n] + text[-n:]


def _first_texts(messages: list[Any]) -> tuple[str, str]:
    """Full stripped text of the first real user turn and of the first assistant reply after it."""
    # The hot loop of a 1M-row dedup: string content is read inline, other shapes go
    # through message_text.
    start = -1
    user = ""
    for i, m in enumerate(messages):
        if type(m) is dict and m.get("role") == "user":
            c = m.get("content")
            t = (c if type(c) is str else message_text(m)).strip()
            if t and not (t[0] == "<" and _INJECTED_RE.match(t)):
                user, start = t, i
                break
    texts = []
    for m in messages[start + 1 :] if start >= 0 else messages:
        if type(m) is dict and m.get("role") == "assistant":
            c = m.get("content")
            t = (c if type(c) is str else message_text(m)).strip()
            if t:
                texts.append(t)
                if start >= 0 or len(texts) == 2:
                    break
    if start >= 0:
        return user, texts[0] if texts else ""
    # No real user: the first two assistant texts stand in for the pair.
    return (texts + ["", ""])[0], (texts + ["", ""])[1]


def _text_chars(messages: list[Any]) -> int:
    return sum(len(message_text(m)) for m in messages if type(m) is dict)


_MessageKey = tuple[Any, str, str]


def _message_key(m: dict[str, Any]) -> _MessageKey:
    """What makes two messages the same: role, stripped text and reasoning, tool calls by
    name and arguments (call ids are generated per export and differ between copies)."""
    calls = normalize_tool_calls(m) if m.get("tool_calls") else None
    call_key = ""
    if calls:
        call_key = json.dumps(
            [
                [fn.get("name"), fn.get("arguments")]
                for fn in (
                    c.get("function") if isinstance(c.get("function"), dict) else {} for c in calls
                )
            ],
            ensure_ascii=False,
            sort_keys=True,
            default=str,
        )
    reasoning = m.get("reasoning_content") or m.get("thinking") or ""
    text = message_text(m).strip()
    if reasoning:
        text += "\x00" + str(reasoning).strip()
    return (m.get("role"), text, call_key)


def conversation_key(messages: list[Any]) -> list[_MessageKey]:
    """The messages compared by ``DedupFilter``: dict messages only, injected-context user
    turns (``<system-reminder>``, ...) skipped, as in the signature."""
    out = []
    for m in messages:
        if type(m) is not dict and not isinstance(m, dict):
            continue
        if m.get("role") == "user":
            t = message_text(m).lstrip()
            if t[:1] == "<" and _INJECTED_RE.match(t):
                continue
        out.append(_message_key(m))
    return out


def is_truncation(short: list[_MessageKey], long: list[_MessageKey]) -> bool:
    """Whether ``short`` is a copy of ``long`` or a strict prefix of it: every message equal,
    except that the last one may be cut off (its text a prefix of the same message in
    ``long``)."""
    n = len(short)
    if n > len(long):
        return False
    if n == 0:
        return not long
    if short[: n - 1] != long[: n - 1]:
        return False
    a, b = short[-1], long[n - 1]
    return a == b or (a[0] == b[0] and a[2] == b[2] and b[1].startswith(a[1]))


def _group_survivors(rows: list[Any], members: list[int]) -> list[int]:
    """Rows of one signature group that are not a copy or truncation of a longer member.

    ``members`` come longest first (by message count), then in input order."""
    head = rows[members[0]]["messages"]
    try:  # the usual group: exact copies, compared in C without building keys
        if all(rows[i]["messages"] is head or rows[i]["messages"] == head for i in members[1:]):
            return members[:1]
    except Exception:  # noqa: BLE001 - content that cannot be compared: use the keys below
        pass
    keys = {i: conversation_key(rows[i]["messages"]) for i in members}
    order = sorted(members, key=lambda i: (-len(keys[i]), -sum(len(k[1]) for k in keys[i]), i))
    kept: list[int] = []
    for i in order:
        if not any(is_truncation(keys[i], keys[k]) for k in kept):
            kept.append(i)
    return kept


class DedupFilter:
    """Exact, global, longest-wins deduplication of conversations.

    Needs the whole dataset in one call: rows seen in separate calls are never compared.
    Only copies and truncations are dropped: a row goes when its messages equal those of a
    kept row, or are a strict prefix of them (the last message may be cut off mid-text).
    Conversations that share their first exchange and then differ (other tool results,
    other follow-ups) are all kept. Candidates are found by a signature: the first real
    user turn (head and tail, ``prefix_chars`` each) and the first assistant reply after it
    (``asst_chars`` each); only rows sharing it are compared message by message (role,
    text, reasoning, tool-call names and arguments; call ids and other fields ignored).
    Injected-context user turns (``<system-reminder>``, ``<context>``, ...) are skipped in
    both. Rows with neither text are compared by a hash of all their messages instead, so
    unrelated tool-only rows are not merged. The longest row (most messages, then most
    text) is kept; the first seen wins a full tie. Kept rows keep their input order. A
    copy whose *first* reply was cut off has another signature and is not merged.
    Memory: 20 bytes per row (hash, message count, index) plus one sort; at 1M rows the
    peak above the loaded data is under 100 MB, the dropped copies included. Rows that
    share a signature are compared in full, so a hash collision never drops a row.

    Args:
        prefix_chars: characters taken from each end of the first user turn.
        asst_chars: characters taken from each end of the first assistant reply.

    Drop reasons: ``duplicate``, ``malformed_row``, ``malformed_messages``,
    ``malformed_empty_messages``.

    Example:
        >>> msgs = [{'role': 'user', 'content': 'sum 2+2'}, {'role': 'assistant', 'content': '4'}]
        >>> rows = [{'messages': msgs}, {'messages': list(msgs)}]
        >>> kept, dropped = DedupFilter()(rows)
        >>> len(kept), dropped[0]['drop_reason']
        (1, 'duplicate')
    """

    def __init__(self, prefix_chars: int = 100, asst_chars: int = 100) -> None:
        for name, value in (("prefix_chars", prefix_chars), ("asst_chars", asst_chars)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        self.prefix_chars = prefix_chars
        self.asst_chars = asst_chars

    @property
    def __name__(self) -> str:
        return type(self).__name__

    def signature(self, messages: list[Any]) -> int:
        """64-bit signature of a message list (see the class docstring)."""
        user, asst = _first_texts(messages)
        if not user and not asst:
            blob = json.dumps(messages, ensure_ascii=False, sort_keys=True, default=str)
            return xxhash.xxh3_64_intdigest(b"\x00" + blob.encode("utf-8", "surrogatepass"))
        p, a = self.prefix_chars, self.asst_chars
        if len(user) > 2 * p:  # head_tail on text that is already stripped
            user = user[:p] + user[-p:]
        if len(asst) > 2 * a:
            asst = asst[:a] + asst[-a:]
        # The length prefix keeps ("ab", "c") and ("a", "bc") apart.
        key = f"{len(user)}:{user}{asst}"
        return xxhash.xxh3_64_intdigest(key.encode("utf-8", "surrogatepass"))

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        rows = map_col_to_row(rows)
        n = len(rows)
        # Compact typed arrays, not Python ints: 20 bytes per row in all.
        hashes, counts, positions = array("Q"), array("i"), array("q")
        dropped: list[Row] = []
        signature = self.signature
        # The loop allocates no reference cycles, but on a large loaded dataset the
        # collector's full passes over millions of live objects would dominate the run.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for i, row in enumerate(rows):
                reason = malformed_reason(row)
                if reason is None:
                    messages = row["messages"]
                    try:
                        hashes.append(signature(messages))
                    except Exception as exc:  # noqa: BLE001  (a bad row is a drop, never a crash)
                        reason = f"malformed_row:{type(exc).__name__}"
                    else:
                        counts.append(len(messages))
                        positions.append(i)
                        continue
                dropped.append(drop(row, reason))
            kept_idx = self._winners(
                rows,
                np.frombuffer(hashes, dtype=np.uint64),
                np.frombuffer(counts, dtype=np.int32),
                np.frombuffer(positions, dtype=np.int64),
            )
            keep = np.zeros(n, dtype=bool)
            keep[kept_idx] = True
            kept = [rows[i] for i in np.flatnonzero(keep).tolist()]
            losers = np.setdiff1d(np.frombuffer(positions, dtype=np.int64), kept_idx).tolist()
            dropped.extend(drop(rows[i], DUPLICATE) for i in losers)
        finally:
            if gc_was_enabled:
                gc.enable()
        return kept, dropped

    @classmethod
    def _winners(
        cls, rows: list[Any], hashes: np.ndarray, counts: np.ndarray, positions: np.ndarray
    ) -> np.ndarray:
        """Row index of every kept row: each signature group's longest row and any member
        that is not a copy or truncation of a longer one."""
        if len(positions) == 0:
            return positions
        # Sort by signature, then most messages first, then input order.
        perm = np.lexsort((positions, -counts, hashes))
        order = positions[perm]
        sorted_hashes = hashes[perm]
        first = np.ones(len(order), dtype=bool)
        first[1:] = sorted_hashes[1:] != sorted_hashes[:-1]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = first[1:]
        winners = [order[first & last]]  # signatures seen once: nothing to compare
        starts = np.flatnonzero(first & ~last).tolist()
        ends = np.flatnonzero(last & ~first).tolist()
        for s, e in zip(starts, ends):
            group = order[s : e + 1].tolist()
            winners.append(np.asarray(_group_survivors(rows, group), dtype=np.int64))
        return np.concatenate(winners)


_TOKEN_RE = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3]|[^\W_]+", re.UNICODE
)


_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant (golden ratio) to mix token hashes


def conversation_text(messages: list[Any]) -> str:
    """User and assistant text of a conversation (system prompts and tool output are shared
    boilerplate across many rows and would make unrelated rows look alike)."""
    return "\n".join(
        message_text(m)
        for m in messages
        if type(m) is dict and m.get("role") in ("user", "assistant")
    )


class NearDedupFilter:
    """Near-duplicate removal with MinHash LSH (datasketch), longest copy kept.

    Needs the whole dataset in one call. Each row's user and assistant text is lower-cased,
    split into word tokens (each CJK character is a token) and shingled into ``ngram``-token
    windows; rows whose MinHash Jaccard estimate reaches ``threshold`` are near duplicates.
    Rows are visited longest first (most messages, then most text, then input order), so
    the longest copy of each cluster is the one kept; kept rows keep their input order.

    Args:
        threshold: Jaccard similarity at or above which two rows are duplicates (0 < t <= 1).
        num_perm: MinHash permutations; more is more precise and slower.
        ngram: tokens per shingle.
        max_chars: only the first ``max_chars`` characters of each text are shingled.
        seed: MinHash seed (fixed for determinism).

    Drop reasons: ``near_duplicate`` and the shared ``malformed_*`` reasons.

    Example:
        >>> ask = 'please list the files in the repo and count them all'
        >>> a = {'messages': [{'role': 'user', 'content': ask}]}
        >>> b = {'messages': [{'role': 'user', 'content': ask + ' please'}]}
        >>> kept, dropped = NearDedupFilter(threshold=0.8)([a, b])
        >>> len(kept), dropped[0]['drop_reason']
        (1, 'near_duplicate')
    """

    def __init__(
        self,
        threshold: float = 0.8,
        num_perm: int = 128,
        ngram: int = 3,
        max_chars: int = 20000,
        seed: int = 1,
    ) -> None:
        if not (isinstance(threshold, (int, float)) and 0.0 < threshold <= 1.0):
            raise ValueError(f"threshold={threshold!r} must be in (0, 1]")
        if not isinstance(num_perm, int) or num_perm < 16:
            raise ValueError(f"num_perm={num_perm!r} must be an integer >= 16")
        if not isinstance(ngram, int) or ngram < 1:
            raise ValueError(f"ngram={ngram!r} must be a positive integer")
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars={max_chars!r} must be a positive integer")
        self.threshold = float(threshold)
        self.num_perm = num_perm
        self.ngram = ngram
        self.max_chars = max_chars
        self.seed = seed

    @property
    def __name__(self) -> str:
        return type(self).__name__

    def shingle_hashes(self, text: str) -> np.ndarray:
        """Distinct 32-bit hashes of the ``ngram``-token shingles of ``text`` (sorted)."""
        tokens = _TOKEN_RE.findall(text[: self.max_chars].lower())
        if not tokens:
            return np.empty(0, dtype=np.uint64)
        # Each token is hashed once; numpy then folds neighbouring token hashes into
        # shingle hashes, instead of building and hashing every n-gram string in Python.
        h = np.fromiter(
            (xxhash.xxh32_intdigest(t.encode("utf-8", "surrogatepass")) for t in tokens),
            dtype=np.uint64,
            count=len(tokens),
        )
        n = min(self.ngram, len(h))
        width = len(h) - n + 1
        s = h[:width].copy()
        for k in range(1, n):
            s = s * _MIX + h[k : k + width]  # wraps modulo 2**64, as intended
        s ^= s >> np.uint64(32)
        return np.unique(s & np.uint64(0xFFFFFFFF))

    def _permutations(self) -> tuple[np.ndarray, np.ndarray]:
        perms = getattr(self, "_perms", None)
        if perms is None:
            from datasketch import MinHash

            # datasketch's own permutations, so the values equal its MinHash's exactly.
            a, b = MinHash(num_perm=self.num_perm, seed=self.seed, scheme="affine32").permutations
            perms = self._perms = (a.astype(np.uint32), b.astype(np.uint32))
        return perms

    def minhash_batch(self, shingles: list[np.ndarray]) -> np.ndarray:
        """MinHash values of many shingle sets at once, ``(len(shingles), num_perm)`` uint32.

        The values of datasketch's ``MinHash(scheme='affine32')`` updated with each set (an
        empty set keeps the initial 0xFFFFFFFF), without a ``MinHash`` object per row: every
        shingle of the batch is mixed in one numpy call, then each row's shingles are
        permuted (one uint32 product, which wraps mod 2**32 as the scheme intends) and
        reduced to their minimum. (``minimum.reduceat`` over the whole batch is 3-10x slower
        than the per-row reduction: it walks the product column by column.)
        """
        a, b = self._permutations()
        out = np.full((len(shingles), self.num_perm), _MAX32, dtype=np.uint32)
        sizes = [len(s) for s in shingles]
        if not any(sizes):
            return out
        hv = _fmix32(np.concatenate(shingles).astype(np.uint32))
        start = 0
        for r, size in enumerate(sizes):
            if size:
                out[r] = (hv[start : start + size, None] * a + b).min(axis=0)
                start += size
        return out

    def sketch(
        self, rows: list[Any], base: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, str]]]:
        """What the decision needs of a batch, and nothing of the rows themselves.

        Returns ``keys`` (n, 3) int64 rows of (messages, text characters, ``base`` + index),
        ``sigs`` (n, num_perm) uint32 MinHash values, ``has`` (n,) bool (the text has
        shingles) and ``bad``: (position, reason) of the rows that cannot be compared.
        Rows are processed in sub-batches, so at most a few hundred shingle sets are held.
        """
        keys: list[tuple[int, int, int]] = []
        sig_parts: list[np.ndarray] = []
        has_parts: list[np.ndarray] = []
        bad: list[tuple[int, str]] = []
        for start in range(0, len(rows), _SKETCH_ROWS):
            shingles: list[np.ndarray] = []
            for i, row in enumerate(rows[start : start + _SKETCH_ROWS], base + start):
                reason = malformed_reason(row)
                if reason is None:
                    try:
                        messages = row["messages"]
                        text = conversation_text(messages)
                        shingles.append(self.shingle_hashes(text))
                        keys.append((len(messages), len(text), i))
                        continue
                    except Exception as exc:  # noqa: BLE001  (a bad row is a drop, never a crash)
                        reason = f"malformed_row:{type(exc).__name__}"
                bad.append((i, reason))
            sig_parts.append(self.minhash_batch(shingles))
            has_parts.append(np.fromiter((len(s) > 0 for s in shingles), bool, len(shingles)))
        sigs = (
            np.concatenate(sig_parts)
            if sig_parts
            else np.empty((0, self.num_perm), dtype=np.uint32)
        )
        has = np.concatenate(has_parts) if has_parts else np.empty(0, dtype=bool)
        return np.asarray(keys, dtype=np.int64).reshape(-1, 3), sigs, has, bad

    def select(self, keys: np.ndarray, sigs: np.ndarray, has: np.ndarray) -> np.ndarray:
        """Positions (``keys[:, 2]``) kept, sorted: rows are visited longest first (most
        messages, then most text, then position) and dropped when the LSH index finds a kept
        row whose estimated Jaccard reaches ``threshold``. Rows without shingles are kept."""
        from datasketch import LeanMinHash, MinHashLSH

        # LSH banding is an S-curve around ``threshold``: with equal weights a pair at J=0.88
        # and threshold 0.8 was missed ~15% of the time. Weigh false negatives heavily;
        # the extra candidates are cheap because each is confirmed by its MinHash estimate.
        lsh = MinHashLSH(threshold=self.threshold, num_perm=self.num_perm, weights=(0.05, 0.95))
        where: dict[int, int] = {}  # kept position -> its row in sigs, to confirm candidates
        keep: list[int] = []
        order = np.lexsort((keys[:, 2], -keys[:, 1], -keys[:, 0])) if len(keys) else []
        for k in np.asarray(order).tolist():
            pos = int(keys[k, 2])
            if has[k]:
                sig = sigs[k]
                mh = LeanMinHash(seed=self.seed, hashvalues=sig, scheme="affine32")
                if any(
                    np.count_nonzero(sigs[where[c]] == sig) / len(sig) >= self.threshold
                    for c in lsh.query(mh)
                ):
                    continue
                lsh.insert(pos, mh)
                where[pos] = k
            keep.append(pos)
        return np.sort(np.asarray(keep, dtype=np.int64))

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        rows = map_col_to_row(rows)
        keys, sigs, has, bad = self.sketch(rows)
        dropped: list[Row] = [drop(rows[i], reason) for i, reason in bad]
        keep = self.select(keys, sigs, has)
        losers = np.setdiff1d(keys[:, 2], keep).tolist()
        dropped.extend(drop(rows[i], NEAR_DUPLICATE) for i in losers)
        return [rows[i] for i in keep.tolist()], dropped


_MAX32 = np.uint32(0xFFFFFFFF)
_SKETCH_ROWS = 256  # rows whose shingle sets are held at once


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer, the pre-mix datasketch's affine32 scheme applies."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))
