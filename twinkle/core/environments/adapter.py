"""The ``tasks`` adapter: builds the bundled task environments by name for the registry.

Example:
    >>> adapter = TaskAdapter()
    >>> adapter.list_environments()
    ['code', 'math', 'multiple_choice']
    >>> adapter.get_environment("math", limit=3).spec.metadata["num_tasks"]
    3
"""

from __future__ import annotations

from typing import Any

__all__ = ["TaskAdapter"]

# name -> (module, class); imported on first use so listing stays free.
_ENVIRONMENTS = {
    "code": ("twinkle.core.environments.code_tests", "CodeEnvironment"),
    "math": ("twinkle.core.environments.math_word", "MathEnvironment"),
    "multiple_choice": ("twinkle.core.environments.multiple_choice", "MultipleChoiceEnvironment"),
}


class TaskAdapter:
    """Adapter over the built-in JSONL task environments (``math``, ``multiple_choice``, ``code``).

    ``get_environment(name, **config)`` passes ``config`` to the environment's constructor
    (``path``, ``limit``, ``system_prompt``, and for ``code`` ``sandbox_url``/``timeout``).

    Example:
        >>> TaskAdapter().get_environment("multiple_choice").spec.adapter
        'tasks'
    """

    name = "tasks"

    def list_environments(self) -> list[str]:
        return sorted(_ENVIRONMENTS)

    def environment_class(self, name: str) -> type:
        from importlib import import_module

        if name not in _ENVIRONMENTS:
            raise KeyError(
                f"'{name}' not found in adapter 'tasks'. Available: {self.list_environments()}"
            )
        module, attr = _ENVIRONMENTS[name]
        return getattr(import_module(module), attr)

    def get_environment(self, name: str, **config: Any) -> Any:
        return self.environment_class(name)(**config)

    def get_environment_info(self, name: str) -> dict[str, Any]:
        cls = self.environment_class(name)
        return {
            "name": name,
            "adapter": self.name,
            "class": cls.__name__,
            "description": (cls.__doc__ or "").strip().splitlines()[0],
        }

    def get_default_system_prompt(self, name: str) -> str | None:
        return None
