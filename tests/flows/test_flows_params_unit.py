"""The flow parameter models as the Prefect UI shows them: descriptions read as plain text."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

import flows.params as params

MODELS = [
    obj
    for obj in vars(params).values()
    if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == params.__name__
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_descriptions_hold_nothing_the_ui_would_strip_as_html(model):
    # The UI renders descriptions as Markdown: "<cwd>" would be read as a tag and vanish.
    for name, field in model.model_fields.items():
        assert not re.search(r"<[A-Za-z/!][^>]*>", field.description or ""), f"{model}.{name}"
