"""Reading the formats public datasets use: OpenAI, ShareGPT (incl. glaive tool calls), Alpaca,
Hugging Face save_to_disk folders, folders and globs; clear errors for other rows."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from twinkle.io import DatasetFormatError, count_rows, read_rows_list, write_rows
from twinkle.io_formats import convert_row, detect_format

# The shape of the Stanford Alpaca / alpaca-zh rows (optional system and history as in
# LLaMA-Factory's alpaca format).
ALPACA = [
    {
        "instruction": "Give three tips for staying healthy.",
        "input": "",
        "output": "1. Eat a balanced diet.\n2. Exercise regularly.\n3. Sleep enough.",
    },
    {
        "instruction": "把下面的句子翻译成英文。",
        "input": "今天天气很好。",
        "output": "The weather is nice today.",
        "system": "你是一个翻译助手。",
        "history": [["你好", "你好！有什么可以帮你？"]],
        "source": "alpaca_zh",
    },
]

# glaive-function-calling in ShareGPT form (LLaMA-Factory's glaive_toolcall_en/zh): tools as
# JSON text, function_call / observation turns.
GLAIVE = {
    "conversations": [
        {"from": "human", "value": "Hi, I need to convert 1000 US dollars to Euros."},
        {
            "from": "function_call",
            "value": '{"name": "convert_currency", "arguments": '
            '{"amount": 1000, "from_currency": "USD", "to_currency": "EUR"}}',
        },
        {"from": "observation", "value": '{"converted_amount": 850.0, "currency": "EUR"}'},
        {"from": "gpt", "value": "1000 US dollars is approximately 850 Euros."},
        {"from": "human", "value": "And 50 pounds to yen, and 20 euros to dollars?"},
        {
            "from": "function_call",
            "value": '[{"name": "convert_currency", "arguments": {"amount": 50, "from_currency": '
            '"GBP", "to_currency": "JPY"}}, {"name": "convert_currency", "arguments": '
            '{"amount": 20, "from_currency": "EUR", "to_currency": "USD"}}]',
        },
        {"from": "observation", "value": '{"converted_amount": 9400}'},
        {"from": "observation", "value": '{"converted_amount": 21.7}'},
        {"from": "gpt", "value": "50 GBP is about 9,400 JPY and 20 EUR is about 21.70 USD."},
    ],
    "system": "You are a helpful assistant with access to functions.",
    "tools": json.dumps(
        [
            {
                "name": "convert_currency",
                "description": "Convert an amount between currencies",
                "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
            }
        ]
    ),
}

# The Vicuna / ShareGPT dump shape: an id and human/gpt turns.
SHAREGPT = {
    "id": "QWJhYvA_0",
    "conversations": [
        {"from": "human", "value": "Summarize the plot of Hamlet in two sentences."},
        {"from": "gpt", "value": "Prince Hamlet seeks revenge for his father's murder..."},
    ],
}

# The raw glaiveai/glaive-function-calling-v2 shape: schemas in the system text, turns in one
# "chat" string, arguments as a single-quoted JSON string.
GLAIVE_RAW = {
    "system": "SYSTEM: You are a helpful assistant with access to the following functions. "
    'Use them if required -\n{\n    "name": "get_news_headlines",\n    "description": '
    '"Get the latest news headlines",\n    "parameters": {"type": "object", '
    '"properties": {"country": {"type": "string"}}}\n}\n',
    "chat": "USER: Can you tell me the latest news headlines for the United States? \n\n\n"
    'ASSISTANT: <functioncall> {"name": "get_news_headlines", "arguments": '
    '\'{"country": "United States"}\'} <|endoftext|>\n\n\n'
    'FUNCTION RESPONSE: {"headlines": ["Biden announces new vaccine mandates"]}\n\n\n'
    "ASSISTANT: Here are the latest news headlines for the United States: Biden announces "
    "new vaccine mandates. <|endoftext|>\n\n\nUSER: Thanks! \n\n\n"
    "ASSISTANT: You're welcome! <|endoftext|>\n",
}

OPENAI_PARTS = {
    "id": "parts",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Describe this picture."}]},
        {"role": "assistant", "content": "A cat on a sofa."},
    ],
}


def test_alpaca_rows_become_messages_and_keep_other_fields():
    plain, full = (convert_row(r) for r in ALPACA)
    assert plain["messages"] == [
        {"role": "user", "content": ALPACA[0]["instruction"]},
        {"role": "assistant", "content": ALPACA[0]["output"]},
    ]
    assert [m["role"] for m in full["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert full["messages"][3]["content"] == "把下面的句子翻译成英文。\n\n今天天气很好。"
    assert full["source"] == "alpaca_zh" and "instruction" not in full and "history" not in full


def test_glaive_function_calls_become_tool_calls_with_matching_ids():
    row = convert_row(GLAIVE)
    msgs = row["messages"]
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    first = msgs[2]["tool_calls"][0]
    assert first["type"] == "function" and first["function"]["name"] == "convert_currency"
    assert json.loads(first["function"]["arguments"])["amount"] == 1000
    assert msgs[3]["tool_call_id"] == first["id"]
    second_ids = [c["id"] for c in msgs[6]["tool_calls"]]
    assert len(set(second_ids)) == 2 and first["id"] not in second_ids
    assert [msgs[7]["tool_call_id"], msgs[8]["tool_call_id"]] == second_ids
    assert row["tools"][0] == {
        "type": "function",
        "function": json.loads(GLAIVE["tools"])[0],
    }
    assert "conversations" not in row and "system" not in row


def test_sharegpt_plain_and_openai_parts():
    row = convert_row(SHAREGPT)
    assert row["id"] == SHAREGPT["id"] and [m["role"] for m in row["messages"]] == [
        "user",
        "assistant",
    ]
    assert convert_row(OPENAI_PARTS) is OPENAI_PARTS  # already OpenAI: untouched
    as_messages = {"messages": SHAREGPT["conversations"]}  # ShareGPT turns under "messages"
    assert convert_row(as_messages)["messages"][0] == row["messages"][0]
    assert detect_format({"question": "q"}) is None


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_files_of_each_format_read_as_openai(tmp_path, suffix):
    write_rows(tmp_path / f"alpaca{suffix}", ALPACA)
    write_rows(tmp_path / f"sharegpt{suffix}", [GLAIVE, SHAREGPT])
    write_rows(tmp_path / f"openai{suffix}", [OPENAI_PARTS])
    rows = read_rows_list(tmp_path)  # a folder: its data files, sorted
    assert len(rows) == count_rows(tmp_path) == 5
    assert all(isinstance(r["messages"], list) and r["messages"] for r in rows)
    glob_rows = read_rows_list(str(tmp_path / f"share*{suffix}"))
    assert [len(r["messages"]) for r in glob_rows] == [10, 2]


def test_unknown_format_names_file_and_row(tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_rows(path, [SHAREGPT, {"id": "t1", "question": "2+2?"}])
    with pytest.raises(DatasetFormatError) as err:
        read_rows_list(path, format="auto")
    assert "tasks.jsonl" in str(err.value) and "row 2" in str(err.value)
    assert "no known conversation format" in str(err.value)
    assert read_rows_list(path)[1] == {"id": "t1", "question": "2+2?"}  # default: passed on
    with pytest.raises(DatasetFormatError, match="row 1"):
        read_rows_list(path, format="alpaca")
    broken = dict(GLAIVE, conversations=[{"from": "function_call", "value": "not json"}])
    write_rows(path, [broken])
    with pytest.raises(DatasetFormatError, match="row 1: function_call value"):
        read_rows_list(path)
    with pytest.raises(ValueError, match="unknown format"):
        read_rows_list(path, format="csv")


def test_datasets_objects_and_save_to_disk_folders(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list([SHAREGPT, dict(SHAREGPT, id="second")])
    rows = read_rows_list(ds)
    assert [r["id"] for r in rows] == ["QWJhYvA_0", "second"] and rows[0]["messages"]
    ds.save_to_disk(str(tmp_path / "saved"))
    assert count_rows(tmp_path / "saved") == 2
    assert read_rows_list(tmp_path / "saved")[1]["messages"][1]["role"] == "assistant"
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ALPACA[:1])})
    dd.save_to_disk(str(tmp_path / "dict"))
    assert read_rows_list(tmp_path / "dict")[0]["messages"][0]["role"] == "user"


def test_curate_reads_sharegpt_and_alpaca_and_counts_hold(tmp_path):
    from twinkle.cli.curate import curate

    write_rows(tmp_path / "in" / "a.jsonl", ALPACA)
    write_rows(tmp_path / "in" / "g.json", [GLAIVE, SHAREGPT])
    out, log = tmp_path / "out.jsonl", tmp_path / "dropped.jsonl"
    args = [str(tmp_path / "in" / "*"), "-o", str(out), "--dropped", str(log), "-q"]
    result = CliRunner().invoke(curate, args)
    assert result.exit_code == 0, result.output
    kept = read_rows_list(out)
    dropped = read_rows_list(log) if log.exists() else []
    assert len(kept) + len(dropped) == 4
    assert all("messages" in r for r in kept)
    write_rows(tmp_path / "bad.jsonl", [{"question": "x"}])
    bad = CliRunner().invoke(curate, [str(tmp_path / "bad.jsonl"), "-o", str(out), "-q"])
    assert bad.exit_code != 0 and "bad.jsonl" in bad.output and "row 1" in bad.output
    forced = CliRunner().invoke(
        curate, [str(tmp_path / "in" / "a.jsonl"), "-o", str(out), "--format", "sharegpt", "-q"]
    )
    assert forced.exit_code != 0 and "row 1" in forced.output


def test_raw_glaive_rows_become_tools_and_tool_calls():
    row = convert_row(GLAIVE_RAW)
    msgs = row["messages"]
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert msgs[0]["content"].endswith("Use them if required")
    call = msgs[2]["tool_calls"][0]
    assert call["function"]["name"] == "get_news_headlines"
    assert json.loads(call["function"]["arguments"]) == {"country": "United States"}
    assert msgs[3]["tool_call_id"] == call["id"] and "<|endoftext|>" not in msgs[4]["content"]
    assert row["tools"][0]["function"]["name"] == "get_news_headlines"
    assert detect_format(GLAIVE_RAW) == "glaive" and "chat" not in row
