"""Every docstring example under ``twinkle/`` and ``flows/`` runs and gives what it shows.

One pytest case per module, found with ``pkgutil.walk_packages`` so a new module is picked
up without editing this file. The examples are the documentation's promise: a stale one
(an API that changed under it) fails here instead of misleading a reader.
"""

import doctest
import importlib
import io
import pkgutil

import pytest

import flows
import twinkle

#: Modules whose doctests are not run, each with the reason. Keep this list short.
EXCLUDED = {
    # Importing it runs the click CLI, which prints help and exits.
    "twinkle.__main__": "runs the CLI on import",
}

MODULES = sorted(
    m.name
    for pkg in (twinkle, flows)
    for m in pkgutil.walk_packages(pkg.__path__, f"{pkg.__name__}.")
    if m.name not in EXCLUDED
)

#: Modules whose examples start a server or load NLP models: run only without ``-m "not slow"``.
SLOW = {
    "twinkle.preprocessor.pii.filter": "loads presidio and spaCy models",
    "twinkle.testing.openai_server": "starts OpenAI-compatible servers",
    "twinkle.container": "starts an environment server",
    "twinkle.container.client": "starts an environment server",
    "twinkle.container.server": "starts environment servers",
    "twinkle.utils.serving": "starts a server",
}

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def test_exclusions_name_real_modules():
    every = {m.name for m in pkgutil.walk_packages(twinkle.__path__, "twinkle.")}
    assert set(EXCLUDED) <= every, set(EXCLUDED) - every
    assert set(SLOW) <= set(MODULES), set(SLOW) - set(MODULES)
    assert len(MODULES) > 50  # the walk found the package, not an empty path


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "name", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW else m for m in MODULES]
)
def test_module_doctests(name, tmp_path, monkeypatch):
    # Examples that write files write them into a fresh directory, not the checkout.
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    report = io.StringIO()
    # exclude_empty keeps the count honest; the finder only reports objects defined here.
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        runner.run(test, out=report.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, report.getvalue()
