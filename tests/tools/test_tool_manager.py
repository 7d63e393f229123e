"""ToolManager: construction, registry, and dispatch that never raises."""

import pytest

from twinkle.tools import Tool, ToolManager
from twinkle.tools.tool_manager import _extract_name


class Search(Tool):
    def __call__(self, tool_name, arguments):
        return f"Search results for: {arguments.get('query', '')}"

    def tool_info(self):
        return {"type": "function", "function": {"name": "search", "parameters": {}}}


class Boom(Tool):
    def __call__(self, tool_name, arguments):
        raise RuntimeError("disk full")

    def tool_info(self):
        return {"type": "function", "function": {"name": "boom", "parameters": {}}}


class Nameless(Tool):
    def __call__(self, tool_name, arguments):
        return ""

    def tool_info(self):
        return {"type": "function", "function": {"name": ""}}


def call(name, arguments):
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_construction_forms():
    assert ToolManager().names() == []
    assert ToolManager([Search(), Boom()]).names() == ["search", "boom"]
    assert ToolManager({"s": Search()}).names() == ["s"]
    with pytest.raises(TypeError, match="ToolManager expects"):
        ToolManager("search")
    with pytest.raises(ValueError, match="non-empty"):
        ToolManager([Nameless()])
    with pytest.raises(ValueError, match="non-empty"):
        ToolManager().register(object())


def test_register_unregister_copy_infos():
    manager = ToolManager([Search()])
    manager.register(Boom())
    clone = manager.copy()
    assert manager.unregister("boom").tool_info()["function"]["name"] == "boom"
    assert manager.unregister("boom") is None
    assert clone.names() == ["search", "boom"]  # the copy keeps its own registry
    assert [i["function"]["name"] for i in manager.tool_infos()] == ["search"]
    assert _extract_name({"function": {"name": "x"}}) == "x"
    assert _extract_name({"function": {"name": ""}}) is None
    assert _extract_name("nope") is None


@pytest.mark.parametrize(
    ("tool_call", "expected"),
    [
        (call("search", '{"query": "py"}'), "Search results for: py"),
        (call("search", {"query": "py"}), "Search results for: py"),
        (call("search", None), "Search results for: "),
        (call("search", "  "), "Search results for: "),
        ("search", "Error: tool_call must be an object, got str."),
        ({"function": "search"}, 'Error: tool_call missing "function" object.'),
        ({"function": {"arguments": "{}"}}, 'Error: tool_call missing "function.name".'),
        (call("nope", "{}"), "Error: unknown tool 'nope'. Available: boom, search."),
        (call("search", 7), 'Error: "arguments" must be a JSON string or object, got int.'),
        (call("boom", "{}"), "Error: tool 'boom' raised RuntimeError: disk full"),
    ],
)
def test_dispatch_never_raises(tool_call, expected):
    assert ToolManager([Search(), Boom()])(tool_call) == expected


def test_invalid_json_and_empty_manager():
    manager = ToolManager([Search()])
    assert manager(call("search", "{not json")).startswith("Error: invalid JSON in arguments: ")
    assert ToolManager()(call("x", "{}")) == "Error: unknown tool 'x'. Available: (none)."


def test_is_blocking():
    class Quick(Search):
        blocking = False

        def tool_info(self):
            return {"type": "function", "function": {"name": "quick", "parameters": {}}}

    manager = ToolManager([Search(), Quick()])
    assert manager.is_blocking(call("search", "{}")) is True
    assert manager.is_blocking(call("quick", "{}")) is False
    assert manager.is_blocking(call("unknown", "{}")) is False
    assert manager.is_blocking("garbage") is False


@pytest.mark.parametrize(
    "arguments",
    ['{"query": "x", "k": 3}', ' {"k": NaN} ', '{"k": 123456789012345678901234567890}', "  ", None],
)
def test_arguments_decode_as_json_does(arguments):
    # Exactly json's reading (NaN, integers past 64 bits), blank meaning {}.
    import json

    from twinkle.tools.tool_manager import parse_arguments

    expected = json.loads(arguments) if arguments and arguments.strip() else {}
    assert str(parse_arguments(arguments)) == str(expected)


def test_broken_arguments_get_jsons_message():
    import json

    from twinkle.tools.tool_manager import parse_arguments

    with pytest.raises(json.JSONDecodeError) as info:
        json.loads('{"a": 1,}')
    with pytest.raises(ValueError) as ours:
        parse_arguments('{"a": 1,}')
    assert str(ours.value) == f"Error: invalid JSON in arguments: {info.value}"
