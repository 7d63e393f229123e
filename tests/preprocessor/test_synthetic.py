"""The seeded generator: determinism, labels, defect coverage, and tool outputs that a real
shell with python3 reproduces exactly (run here in a temporary directory)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twinkle.data_format import is_agent_row, normalize_tool_calls
from twinkle.envs.base import format_command_output
from twinkle.synthetic import DEFECTS, HOME, LANGS, TOOLS, generate, label_of, main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "conversations.jsonl"
#: ``python -m twinkle.synthetic <EXAMPLE_ARGS> -o examples/conversations.jsonl`` wrote
#: the examples.
EXAMPLE_ARGS = ["--rows", "40", "--seed", "2026", "--defects", "--defect-rate", "0.2"]


def test_same_seed_same_rows_and_different_seed_differs():
    a = generate(30, seed=5, defects=True, target_bytes=3000)
    assert a == generate(30, seed=5, defects=True, target_bytes=3000)
    assert a != generate(30, seed=6, defects=True, target_bytes=3000)


def test_rows_have_ids_models_tools_and_labels():
    rows = generate(60, seed=1, defects=True)
    assert len({r["id"] for r in rows}) == 60
    for r in rows:
        assert r["model_id"] and r["tools"] == TOOLS
        label = label_of(r)
        assert label["lang"] in LANGS
        assert label["defect"] == "none" or label["defect"] in DEFECTS
        assert label["agent"] == is_agent_row(r["messages"])
    assert {label_of(r)["lang"] for r in rows} == set(LANGS)
    assert sum(label_of(r)["agent"] for r in rows) > 30  # mostly agent rows


def test_labelled_mode_covers_every_defect_in_every_language():
    rows = generate(700, seed=3, defects=True, defect_rate=0.5)
    seen = {(label_of(r)["defect"], label_of(r)["lang"]) for r in rows}
    for defect in DEFECTS:
        for lang in LANGS:
            assert (defect, lang) in seen
    dups = [r for r in rows if label_of(r)["defect"] == "exact_duplicate"]
    by_id = {r["id"]: r for r in rows}
    assert dups and all(by_id[label_of(d)["dup_of"]]["messages"] == d["messages"] for d in dups)
    assert generate(50, seed=3)[0] and all(
        label_of(r)["defect"] == "none" for r in generate(50, seed=3)
    )


def test_target_bytes_grows_rows():
    small = generate(20, seed=2)
    big = generate(20, seed=2, target_bytes=4096)

    def size(rows):
        return sum(len(json.dumps(r["messages"], ensure_ascii=False).encode()) for r in rows) / len(
            rows
        )

    assert size(big) > 1.5 * size(small)
    assert 3000 < size(big) < 5200


@pytest.mark.slow
def test_tool_outputs_are_reproduced_by_a_real_shell(tmp_path):
    rows = [r for r in generate(48, seed=9) if label_of(r)["agent"]]
    home = str(tmp_path)
    checked = 0
    for row in rows:
        results = {m["tool_call_id"]: m["content"] for m in row["messages"] if m["role"] == "tool"}
        for msg in row["messages"]:
            for call in normalize_tool_calls(msg) or ():
                fn = call["function"]
                args = {k: v.replace(HOME, home) for k, v in json.loads(fn["arguments"]).items()}
                expected = results[call["id"]].replace(HOME, home)
                if fn["name"] == "write_file":
                    Path(args["path"]).write_text(args["content"], encoding="utf-8")
                    got = f"File written: {args['path']}"
                elif fn["name"] == "read_file":
                    got = Path(args["path"]).read_text(encoding="utf-8")
                else:
                    assert fn["name"] == "run_command"
                    proc = subprocess.run(
                        ["bash", "-c", args["command"]],
                        capture_output=True,
                        text=True,
                        cwd=home,
                        timeout=30,
                    )
                    got = format_command_output(proc.stdout, proc.stderr, proc.returncode)
                assert got == expected, (row["id"], fn)
                checked += 1
    assert checked > 40


def test_cli_writes_jsonl(tmp_path):
    out = tmp_path / "rows.jsonl"
    assert main(["--rows", "5", "--seed", "1", "-o", str(out), "--defects"]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5 and all(json.loads(line)["messages"] for line in lines)
    with pytest.raises(SystemExit):
        main(["--rows", "5", "-o", str(out), "--langs", "fr"])


def test_examples_file_is_the_documented_generator_output(tmp_path):
    out = tmp_path / "conversations.jsonl"
    subprocess.run(
        [sys.executable, "-m", "twinkle.synthetic", *EXAMPLE_ARGS, "-o", str(out)],
        check=True,
        timeout=60,
        cwd=EXAMPLES.parents[1],
    )
    assert out.read_bytes() == EXAMPLES.read_bytes()
    rows = [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    defects = [label_of(r)["defect"] for r in rows if label_of(r)["defect"] != "none"]
    assert 3 <= len(defects) <= 12


def test_iter_rows_streams_what_generate_returns():
    from twinkle.synthetic import iter_rows

    kwargs = {"seed": 4, "defects": True, "defect_rate": 0.5, "target_bytes": 2000}
    assert list(iter_rows(40, **kwargs)) == generate(40, **kwargs)
    with pytest.raises(ValueError, match="defect_rate"):
        iter_rows(3, defect_rate=2.0)  # checked at the call, before any row


def test_cli_progress_goes_to_stderr_and_quiet_silences_it(tmp_path, capsys):
    assert main(["--rows", "130", "--seed", "1", "--defects", "-o", "-"]) == 0
    shown = capsys.readouterr()
    expected = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in generate(130, 1, True))
    assert shown.out == expected  # stdout holds the rows and nothing else
    assert "130/130" in shown.err
    out = tmp_path / "rows.jsonl"
    assert main(["--rows", "130", "--seed", "1", "--defects", "-q", "-o", str(out)]) == 0
    assert capsys.readouterr().err == ""
    assert out.read_text(encoding="utf-8") == expected


def test_phrase_banks_are_package_data():
    from importlib import resources

    data = resources.files("twinkle.data_format.synthetic") / "data"
    names = sorted(p.name for p in data.iterdir() if p.name.endswith(".json"))
    assert names == ["common.json", *(f"{lang}.json" for lang in sorted(LANGS))]
    banks = {n: json.loads((data / n).read_text(encoding="utf-8")) for n in names}
    # every language bank has the same tables, so a missing translation fails here
    assert len({tuple(sorted(b)) for n, b in banks.items() if n != "common.json"}) == 1


def test_both_module_entry_points_write_the_same_rows(tmp_path):
    args = ["--rows", "12", "--seed", "3", "--defects", "-q", "-o"]
    for module in ("twinkle.synthetic", "twinkle.data_format.synthetic"):
        out = tmp_path / f"{module}.jsonl"
        subprocess.run([sys.executable, "-m", module, *args, str(out)], check=True, timeout=60)
    outs = sorted(tmp_path.glob("*.jsonl"))
    assert len(outs) == 2 and outs[0].read_bytes() == outs[1].read_bytes()
