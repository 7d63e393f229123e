"""The ``verifiers`` adapter: registered, but the package cannot live beside twinkle's pins.

``verifiers`` (Prime Intellect's rubric-scored environments) does not install beside the
project's pinned set; measured with pip 26.3 on 2026-12-01 (``pip install --dry-run
'twinkle[envs]' verifiers==X`` in a fresh venv, then installed):

* ``verifiers`` 0.4.0: ``ResolutionImpossible``, "verifiers 0.4.0 depends on
  openai<3.0.0 and >=2.54.0" against twinkle's ``openai>=3.50,<4``; 0.4 also moved its
  whole API under ``verifiers.v1``;
* ``verifiers`` 0.3.1: needs ``prime-sandboxes>=0.2.39``, hence ``connectrpc<0.12``; the
  resolver then takes ``e2b`` back to 2.56 (``connectrpc`` 0.11.1, ``protobuf-py`` 0.1.1)
  instead of the 2.63 the project is tested with;
* ``verifiers`` 0.3.0 (what an unpinned ``verifiers`` resolves to): accepted with ``e2b``
  2.63, but through ``prime-sandboxes`` 0.2.38, whose ``connect-python`` 0.9.0 ships the same
  ``connectrpc`` import package as ``connectrpc`` 0.12.1 and overwrites it, so ``import e2b``
  fails ("cannot import name 'DEFAULT_READ_MAX_BYTES' from 'connectrpc.server'") while
  ``pip check`` reports nothing.

So the adapter lists nothing and ``get_environment`` raises
:class:`~twinkle.errors.EnvError` naming the conflict; the other adapters are unaffected.
Run verifiers environments in their own virtualenv and serve them to twinkle over HTTP
(``twinkle.container``), or convert their datasets for the ``huggingface`` adapter.

Example:
    >>> VerifiersAdapter().list_environments()
    []
"""

from __future__ import annotations

from typing import Any

from twinkle.core.adapters._common import BaseAdapter
from twinkle.errors import EnvError

__all__ = ["CONFLICT", "VerifiersAdapter"]

CONFLICT = (
    "verifiers cannot be installed beside twinkle's pinned set: verifiers 0.4 requires "
    "openai<3 (twinkle pins openai>=3.50,<4); verifiers 0.3.1 needs connectrpc<0.12 (through "
    "prime-sandboxes), taking e2b back to 2.56; verifiers 0.3.0's prime-sandboxes 0.2.38 "
    "installs connect-python, which overwrites the connectrpc package that e2b imports. Run "
    "it in its own virtualenv and serve its environments over HTTP (twinkle.container), or "
    "export its datasets for the 'huggingface' adapter"
)


class VerifiersAdapter(BaseAdapter):
    """Placeholder for ``verifiers`` environments: always explains the resolver conflict."""

    name = "verifiers"
    requires = ("verifiers",)
    extra = None
    package = "verifiers"
    conflict = CONFLICT
    unavailable = True  # `twinkle env list` says so instead of suggesting a pip line

    def list_environments(self) -> list[str]:
        return []

    def ensure_installed(self) -> None:
        raise EnvError(f"the 'verifiers' adapter is unavailable: {CONFLICT}")

    def get_environment(self, name: str, **config: Any) -> Any:
        self.ensure_installed()

    def get_environment_info(self, name: str) -> dict[str, Any]:
        info = super().get_environment_info(name)
        info["conflict"] = CONFLICT
        return info
