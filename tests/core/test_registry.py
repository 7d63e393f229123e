"""environment_registry: adapters, listing, lookup by name, custom adapters."""

import pytest

from twinkle.core.registry import EnvironmentRegistry, Registry, environment_registry


def test_builtin_adapter_and_environments_are_listed():
    assert "tasks" in environment_registry.list_adapters()
    assert environment_registry.list_environments("tasks") == [
        ("tasks", "code"),
        ("tasks", "math"),
        ("tasks", "multiple_choice"),
    ]
    assert ("tasks", "math") in environment_registry
    assert ("tasks", "nope") not in environment_registry


def test_get_by_name_with_and_without_adapter_and_config():
    env = environment_registry.get("math", "tasks", limit=4)
    assert len(env) == 4 and env.spec.adapter == "tasks" and env.spec.name == "math"
    assert environment_registry.get("tasks/multiple_choice").spec.name == "multiple_choice"
    assert len(environment_registry.get("multiple_choice")) == 20


def test_unknown_names_raise_key_error_listing_what_exists():
    with pytest.raises(KeyError, match="Available"):
        environment_registry.get("no_such_env")
    with pytest.raises(KeyError, match="adapter 'ghost' not found"):
        environment_registry.get("math", "ghost")
    with pytest.raises(TypeError):
        environment_registry.get("math", limit=2, bogus_option=1)


class _Adapter:
    name = "toy"

    def list_environments(self):
        return ["math"]

    def get_environment(self, name, **config):
        return ("toy-env", name, config)


def test_register_adapter_duplicates_and_ambiguity():
    reg = EnvironmentRegistry()
    reg.register_adapter(_Adapter())
    with pytest.raises(ValueError, match="already registered"):
        reg.register_adapter(_Adapter())
    assert reg.get("math", "toy", k=1) == ("toy-env", "math", {"k": 1})
    with pytest.raises(KeyError, match="several adapters"):
        reg.get("math")  # both "tasks" and "toy" offer it
    reg.unregister_adapter("toy")
    reg.unregister_adapter("toy")  # silent when absent
    assert reg.get("math").spec.adapter == "tasks"
    with pytest.raises(TypeError):
        reg.register_adapter(object())


def test_generic_registry_get_caches_and_create_builds():
    reg = Registry("things")

    @reg.register("box")
    class Box:
        pass

    assert reg.get("box") is reg.get("box")
    assert reg.create("box") is not reg.get("box")
    reg.register_instance("one", 1)
    with pytest.raises(KeyError):
        reg.create("one")
    with pytest.raises(ValueError):
        reg.register("box", Box)
    assert sorted(reg) == ["box", "one"] and len(reg) == 2 and "box" in reg
    with pytest.raises(KeyError, match="'missing' not found"):
        reg.get("missing")
