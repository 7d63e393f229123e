"""flows.common.on_ray_if_asked: the one Ray switch the curation, rollout and pipeline flows use."""

from __future__ import annotations

import importlib
import inspect

import pytest

import flows.common as common
from flows.params import RunParams, TrackingParams


class FakeFlow:
    def __init__(self):
        self.options: dict = {}
        self.calls: list[dict] = []

    def with_options(self, **options):
        self.options = options
        return lambda **kw: self.calls.append(kw) or {"ran": "on ray"}


def test_no_address_goes_on_in_this_run():
    fake = FakeFlow()
    assert common.on_ray_if_asked(fake, RunParams(), TrackingParams(), curation=1) is None
    assert fake.calls == []


def test_an_address_reruns_the_flow_on_ray_keyed_by_this_flow_run(monkeypatch):
    monkeypatch.setattr(common, "needs_ray_switch", lambda address: True)
    monkeypatch.setattr(common, "task_runner_for", lambda address, workers: ("ray", address))
    monkeypatch.setattr(common, "flow_run_id", lambda: "parent-run")
    fake, run = FakeFlow(), RunParams(ray_address="ray://head:10001")
    result = common.on_ray_if_asked(fake, run, TrackingParams(), curation="c", rollout="r")
    assert result == {"ran": "on ray"}
    assert fake.options == {"task_runner": ("ray", "ray://head:10001")}
    (call,) = fake.calls
    assert call["curation"] == "c" and call["rollout"] == "r" and call["run"] is run
    assert call["tracking"].run_key == "parent-run"


@pytest.mark.parametrize(
    "module",
    ["flows.curation:curation_flow", "flows.rollout:rollout_flow", "flows.pipeline:pipeline_flow"],
)
def test_each_flow_uses_the_switch(module):
    name, attr = module.split(":")
    flow_obj = getattr(importlib.import_module(name), attr)
    source = inspect.getsource(flow_obj.fn)
    assert f"on_ray_if_asked({attr}, run, tracking" in source
    assert "needs_ray_switch" not in source
