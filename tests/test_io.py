"""twinkle.io: JSONL / JSON / Parquet round trips, counting and clear errors."""

from __future__ import annotations

import json

import pytest

from twinkle.io import (
    MAX_DEPTH,
    DatasetFormatError,
    count_rows,
    read_rows,
    read_rows_list,
    write_rows,
)

ROWS = [
    {
        "id": "a",
        "messages": [
            {"role": "user", "content": "日本語 and ελληνικά"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
        ],
    },
    {
        "id": "b",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "model_id": "m",
    },
]


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_round_trip(tmp_path, suffix):
    path = tmp_path / f"rows{suffix}"
    assert write_rows(path, iter(ROWS)) == 2
    back = read_rows_list(path)
    if suffix == ".parquet":  # Arrow fills absent struct fields and columns with None
        assert back[1]["model_id"] == "m" and back[0]["model_id"] is None
        assert back[0]["messages"][1]["tool_calls"][0]["function"]["name"] == "f"
        assert back[1]["messages"][0]["content"] == [{"type": "text", "text": "hi"}]
    else:
        assert back == ROWS
    assert count_rows(path) == 2


def test_parquet_mixed_types_round_trip_through_json_columns(tmp_path):
    rows = [
        {"id": 1, "messages": [{"role": "assistant", "content": "x", "tool_calls": "[]"}]},
        {"id": 2, "messages": [{"role": "assistant", "content": [{"type": "text", "text": "y"}]}]},
    ]
    path = tmp_path / "mixed.parquet"
    write_rows(path, rows)
    assert read_rows_list(path) == rows


def test_reading_several_files_in_order_and_streaming(tmp_path):
    write_rows(tmp_path / "a.jsonl", [{"id": 1, "messages": []}])
    write_rows(tmp_path / "b.parquet", [{"id": 2, "messages": []}])
    it = read_rows([tmp_path / "a.jsonl", str(tmp_path / "b.parquet")])
    assert next(it)["id"] == 1 and next(it)["id"] == 2
    assert count_rows([tmp_path / "a.jsonl", tmp_path / "b.parquet"]) == 2


def test_blank_lines_skipped_and_json_lines_in_dot_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('\n{"id": 1}\n\n{"id": 2}\n')
    assert [r["id"] for r in read_rows(p)] == [1, 2] and count_rows(p) == 2


def test_broken_line_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": 1}\n\n{"id": 2\n{"id": 3}\n')
    with pytest.raises(DatasetFormatError) as info:
        list(read_rows(p))
    assert info.value.path == str(p) and info.value.line == 3
    assert f"{p}:3:" in str(info.value) and "fix or remove this line" in str(info.value)


def test_non_object_row_and_bad_utf8(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"id": 1}\n[1, 2]\n')
    with pytest.raises(DatasetFormatError, match=r"x.jsonl:2: expected a JSON object"):
        read_rows_list(p)
    q = tmp_path / "y.jsonl"
    q.write_bytes(b'{"id": 1}\n{"t": "\xff\xfe"}\n')
    with pytest.raises(DatasetFormatError, match=r"y.jsonl:2"):
        read_rows_list(q)


def test_broken_json_array_and_parquet(tmp_path):
    p = tmp_path / "arr.json"
    p.write_text('[\n{"id": 1},\n{"id": \n')
    with pytest.raises(DatasetFormatError, match=r"arr.json:\d+: invalid JSON"):
        read_rows_list(p)
    q = tmp_path / "x.parquet"
    q.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DatasetFormatError, match="x.parquet: cannot read Parquet"):
        read_rows_list(q)
    with pytest.raises(DatasetFormatError, match="x.parquet"):
        count_rows(q)


def test_unsupported_extension_and_missing_file(tmp_path):
    with pytest.raises(DatasetFormatError, match="unsupported file type '.csv'"):
        read_rows_list(tmp_path / "a.csv")
    with pytest.raises(DatasetFormatError, match="unsupported"):
        write_rows(tmp_path / "a.txt", [])
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_rows_list(tmp_path / "nope.jsonl")


def test_write_is_atomic_and_creates_parents(tmp_path):
    target = tmp_path / "deep" / "out.jsonl"
    write_rows(target, [{"id": 1}])

    def boom():
        yield {"id": 2}
        raise RuntimeError("producer failed")

    with pytest.raises(RuntimeError):
        write_rows(target, boom())
    assert read_rows_list(target) == [{"id": 1}]  # the old file is intact
    assert [p.name for p in target.parent.iterdir()] == ["out.jsonl"]


def test_unserialisable_values_are_written_as_text(tmp_path):
    import datetime

    path = tmp_path / "o.jsonl"
    write_rows(path, [{"id": 1, "b": b"x", "when": datetime.date(2024, 1, 2)}])
    assert json.loads(path.read_text()) == {"id": 1, "b": "b'x'", "when": "2024-01-02"}


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_values_orjson_refuses_still_round_trip(tmp_path, suffix):
    """orjson writes most rows; lone surrogates (broken scraped text) and integers over 64 bits
    go through the standard library instead, non-string keys become strings as json does."""
    rows = [
        {"id": "s", "text": "broken \ud800 half"},
        {"id": "big", "n": 2**70},
        {"id": "k", "m": {1: "one"}},
    ]
    path = tmp_path / f"odd{suffix}"
    assert write_rows(path, rows) == 3
    assert read_rows_list(path) == [rows[0], rows[1], {"id": "k", "m": {"1": "one"}}]


def test_nan_literals_in_input_are_read_and_nan_is_written_as_null(tmp_path):
    path = tmp_path / "nan.jsonl"
    path.write_text('{"id": "x", "score": NaN}\n')
    back = read_rows_list(path)
    assert back[0]["score"] != back[0]["score"]  # NaN, as the standard library reads it
    write_rows(path, back)
    assert read_rows_list(path) == [{"id": "x", "score": None}]


def _nested(depth):
    """A JSON array nested ``depth`` levels deep, as text."""
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_DEPTH, 900, 5000])
def test_a_row_nested_too_deep_names_file_and_line(tmp_path, depth):
    p = tmp_path / "deep.jsonl"
    p.write_text('{"id": 1}\n{"id": 2, "x": ' + _nested(depth) + "}\n")
    with pytest.raises(
        DatasetFormatError, match=rf"deep.jsonl:2: row nested more than {MAX_DEPTH}"
    ):
        read_rows_list(p)
    assert count_rows(p) == 2  # counting does not decode


def test_rows_just_within_the_depth_cap_round_trip(tmp_path):
    p = tmp_path / "ok.jsonl"
    p.write_text('{"x": ' + _nested(MAX_DEPTH - 1) + "}\n")
    rows = read_rows_list(p)
    assert write_rows(tmp_path / "back.jsonl", rows) == 1
    assert read_rows_list(tmp_path / "back.jsonl") == rows


def test_json_array_errors_name_the_element(tmp_path):
    p = tmp_path / "arr.json"
    p.write_text('[{"id": 1}, 3]')
    with pytest.raises(
        DatasetFormatError, match=r"arr.json: array element 1: expected a JSON object"
    ):
        read_rows_list(p)
    p.write_text('[{"id": 1}, {"x": ' + _nested(300) + "}]")
    with pytest.raises(DatasetFormatError, match=r"arr.json: array element 1: row nested more"):
        read_rows_list(p)
    p.write_text('[{"x": ' + _nested(5000) + "}]")
    with pytest.raises(DatasetFormatError, match=r"arr.json: an array element: row nested more"):
        read_rows_list(p)


def test_parquet_maps_are_read_as_dicts(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pairs = pa.map_(pa.string(), pa.string())
    table = pa.table(
        {
            "messages": pa.array([[("role", "user"), ("content", "hi")]], type=pairs),
            "turns": pa.array([[[("role", "user"), ("content", "hi")]]], type=pa.list_(pairs)),
        }
    )
    pq.write_table(table, tmp_path / "maps.parquet")
    row = read_rows_list(tmp_path / "maps.parquet")[0]
    assert row["messages"] == {"role": "user", "content": "hi"}
    assert row["turns"] == [{"role": "user", "content": "hi"}]
