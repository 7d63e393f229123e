"""The adapters in the environment registry: listing is cold-fast and imports no package."""

import json
import subprocess
import sys

import pytest

from twinkle.core.adapters import ADAPTERS
from twinkle.core.registry import environment_registry
from twinkle.errors import MissingExtraError

LIST_COLD = """
import json, sys, time
t = time.perf_counter()
from twinkle.core.registry import environment_registry as registry
pairs = registry.list_environments()
elapsed = time.perf_counter() - t
heavy = sorted(set(sys.modules) & {"reasoning_gym", "gymnasium", "datasets", "gem", "openenv",
                                    "openai", "math_verify", "torch"})
print(json.dumps({"elapsed": elapsed, "n": len(pairs), "heavy": heavy,
                  "adapters": registry.list_adapters()}))
"""


def test_cold_listing_of_every_adapter_is_fast_and_imports_no_third_party_package():
    out = subprocess.run(
        [sys.executable, "-c", LIST_COLD], capture_output=True, text=True, check=True, timeout=60
    )
    report = json.loads(out.stdout)
    assert report["elapsed"] < 2.0, report
    assert report["heavy"] == []
    assert set(ADAPTERS) - {"gem"} <= set(report["adapters"])
    assert report["n"] > 100  # reasoning-gym alone has about a hundred generators


def test_tasks_names_stay_unambiguous():
    # adding adapters must not make the built-in names ambiguous for adapter-less lookups
    for name in ("math", "multiple_choice", "code"):
        assert environment_registry.resolve(name) == ("tasks", name)


def test_every_adapter_reports_installed_and_info():
    for name in environment_registry.list_adapters():
        adapter = environment_registry.get_adapter(name)
        if not hasattr(adapter, "installed"):
            continue
        envs = adapter.list_environments()
        if adapter.installed() and envs:
            assert adapter.get_environment_info(envs[0])["adapter"] == name


def test_registry_raises_missing_extra_before_not_found():
    class Ghost:
        name = "ghost_adapter_for_tests"
        requires = ("no_such_module_for_twinkle_tests",)

        def list_environments(self):
            return []

        def get_environment(self, name, **config):
            raise AssertionError("not reached")

        def ensure_installed(self):
            from twinkle.errors import require

            require(self.requires[0], "the ghost adapter", "envs")

    environment_registry.register_adapter(Ghost())
    try:
        with pytest.raises(MissingExtraError, match="envs"):
            environment_registry.get("anything", adapter="ghost_adapter_for_tests")
    finally:
        environment_registry.unregister_adapter("ghost_adapter_for_tests")


def test_verifiers_adapter_names_the_resolver_conflict():
    from twinkle.errors import EnvError

    assert environment_registry.list_environments("verifiers") == []
    with pytest.raises(EnvError, match="openai<3.*connectrpc"):
        environment_registry.get("anything", adapter="verifiers")
