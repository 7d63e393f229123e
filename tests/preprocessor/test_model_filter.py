"""ModelFilter: exact names, globs, default families, field and reasons."""

from __future__ import annotations

import pytest

from twinkle.preprocessor.model_filter import DEFAULT_FAMILY_PATTERNS, ModelFilter


def row(model, field="model_id"):
    r = {"messages": [{"role": "user", "content": "hello there"}]}
    if model is not ...:
        r[field] = model
    return r


def reasons(f, models, field="model_id"):
    kept, dropped = f([row(m, field) for m in models])
    assert len(kept) + len(dropped) == len(models)
    out = {}
    for r in kept:
        out[r.get(field)] = None
    for d in dropped:
        out[d.get(field)] = d["drop_reason"]
    return out


def test_documented_exact_whitelist():
    f = ModelFilter(allowed_models=["qwen3.5-4b", "qwen3.5-32b"])
    got = reasons(
        f,
        [
            "qwen3.5-4b",
            "QWEN3.5-32B",
            " qwen3.5-32b ",
            "qwen3.5-32b-instruct",
            "qwen3.5-4",
            "gpt-4o",
        ],
    )
    assert got == {
        "qwen3.5-4b": None,
        "QWEN3.5-32B": None,
        " qwen3.5-32b ": None,
        "qwen3.5-32b-instruct": "model_not_allowed",
        "qwen3.5-4": "model_not_allowed",
        "gpt-4o": "model_not_allowed",
    }


def test_exact_names_are_not_regexes():
    f = ModelFilter(allowed_models=["a.b"])
    assert reasons(f, ["a.b", "axb"]) == {"a.b": None, "axb": "model_not_allowed"}


def test_glob_patterns():
    f = ModelFilter(allowed_models=["qwen3.5-*", "deepseek-ai/deepseek-v?"])
    got = reasons(
        f,
        [
            "qwen3.5-4b",
            "Qwen3.5-235B-A22B",
            "qwen3-8b",
            "deepseek-ai/deepseek-v3",
            "deepseek-ai/deepseek-v31",
        ],
    )
    assert got == {
        "qwen3.5-4b": None,
        "Qwen3.5-235B-A22B": None,
        "qwen3-8b": "model_not_allowed",
        "deepseek-ai/deepseek-v3": None,
        "deepseek-ai/deepseek-v31": "model_not_allowed",
    }


def test_default_families_reject_small_and_vl_models():
    f = ModelFilter()
    assert f.patterns == list(DEFAULT_FAMILY_PATTERNS)
    got = reasons(
        f,
        [
            "qwen/qwen3-235b-a22b",
            "Qwen/Qwen3-235B-A22B-Instruct-2507",
            "qwen/qwen3-coder-480b-a35b",
            "deepseek-ai/deepseek-r1",
            "moonshotai/kimi-k2",
            "z-ai/glm-4.5",
            "zhipuai/glm-5",
            "qwen/qwen3-8b",
            "qwen/qwen3-vl-235b-a22b",
            "qwen/qwen3-32b",
            "gpt-4o",
        ],
    )
    assert got == {
        "qwen/qwen3-235b-a22b": None,
        "Qwen/Qwen3-235B-A22B-Instruct-2507": None,
        "qwen/qwen3-coder-480b-a35b": None,
        "deepseek-ai/deepseek-r1": None,
        "moonshotai/kimi-k2": None,
        "z-ai/glm-4.5": "model_not_allowed",
        "zhipuai/glm-5": None,
        "qwen/qwen3-8b": "model_not_allowed",
        "qwen/qwen3-vl-235b-a22b": "model_not_allowed",
        "qwen/qwen3-32b": "model_not_allowed",
        "gpt-4o": "model_not_allowed",
    }


def test_patterns_and_names_together():
    f = ModelFilter(allowed_models=["gpt-4o"], patterns=[r"my-org/.+"])
    assert reasons(f, ["gpt-4o", "my-org/x-1", "other"]) == {
        "gpt-4o": None,
        "my-org/x-1": None,
        "other": "model_not_allowed",
    }
    assert reasons(ModelFilter(allowed_models=["gpt-4o"]), ["qwen/qwen3-235b-a22b"]) == {
        "qwen/qwen3-235b-a22b": "model_not_allowed"
    }  # a whitelist replaces the defaults


def test_missing_and_odd_values():
    f = ModelFilter(allowed_models=["7"])
    kept, dropped = f([row(...), row(None), row(""), row(7), row(["x"])])
    assert [r["model_id"] for r in kept] == [7]
    assert [d["drop_reason"] for d in dropped] == ["missing_model_id"] * 3 + ["model_not_allowed"]


def test_other_field():
    f = ModelFilter(allowed_models=["m"], field="generator")
    assert reasons(f, ["m", "n"], field="generator") == {"m": None, "n": "model_not_allowed"}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"allowed_models": []},
        {"patterns": []},
        {"allowed_models": [""]},
        {"patterns": ["("]},
        {"field": ""},
        {"allowed_models": [3]},
    ],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        ModelFilter(**kwargs)


def test_a_single_string_is_refused():
    with pytest.raises(TypeError, match="lists of strings"):
        ModelFilter(allowed_models="gpt-4o")
