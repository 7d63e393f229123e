"""The ``verifiers`` adapter: registered, but the package cannot live beside twinkle's pins.

``verifiers`` (Prime Intellect's rubric-scored environments) does not resolve with the
project's pinned set, measured with pip on 2026-12-01:

* ``verifiers`` 0.4.0 requires ``openai<3``; twinkle pins ``openai>=3.50,<4``;
* ``verifiers`` 0.3.1 pulls ``prime-sandboxes``, which needs ``connectrpc<0.12`` and so
  downgrades ``connectrpc`` 0.12.1 -> 0.11.1 and ``protobuf-py`` 0.6.0 -> 0.1.1, breaking
  ``e2b`` 2.63 (a base dependency: ``e2b 2.63.0 has requirement connectrpc<0.13,>=0.12.1``);
* 0.4 also moved its whole API under ``verifiers.v1`` (harnesses, agents, tasksets).

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
    "verifiers cannot be installed beside twinkle's pinned set: verifiers 0.4.0 requires "
    "openai<3 (twinkle pins openai>=3.50,<4), and verifiers 0.3.1 needs connectrpc<0.12 "
    "(through prime-sandboxes) while e2b 2.63 needs connectrpc>=0.12.1. Run it in its own "
    "virtualenv and serve its environments over HTTP (twinkle.container), or export its "
    "datasets for the 'huggingface' adapter"
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
