"""Sandbox templates: named configurations read from a YAML or JSON file.

A template fixes what a sandbox looks like (its read-only root, environment variables,
setup commands) and what it may use (memory, CPU time, processes, network). The built-in
``base`` template (E2B's default name) is always available, so ``Sandbox.create()`` works
without any file. PyYAML parses the file (YAML is a superset of JSON, so one loader covers
both).

Example file::

    allow_unknown: false          # true: unknown template names fall back to 'base'
    templates:
      my-env:
        memory_mb: 2048
        network: true
        env: {PIP_INDEX_URL: http://mirror.local/simple}
        setup: ["mkdir -p /home/user/workspace"]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: E2B's default template name; the SDK sends it when no template is given.
BASE_TEMPLATE = "base"


@dataclass(frozen=True, slots=True)
class Template:
    """One sandbox configuration.

    Args:
        name: the name clients pass as ``template``.
        root: host directory mounted read-only as the sandbox's ``/`` (default: the host
            root); it must provide ``python3``, which runs the sandbox's init.
        env: environment variables of every command.
        setup: shell commands run once when a sandbox is created (a failure fails the create).
        memory_mb: memory of the whole sandbox, in MiB: all its processes and its files
            (its cgroup, where the host has one), and the address-space limit of each process.
        cpu_seconds: CPU-time limit of each process, in seconds.
        max_processes: process limit of the whole sandbox, its init included (stops fork
            bombs).
        network: whether commands may reach the network (loopback only otherwise), through
            their own network namespace and slirp4netns.
        cpu_count: the CPUs the sandbox may use together (its cgroup's CPU quota), reported
            to clients.
        disk_mb: the size of each of its writable tmpfs mounts (``/home/user``, ``/tmp``,
            ``/dev/shm``), reported to clients.

    Example:
        >>> Template(name='big', memory_mb=4096, network=True).memory_mb
        4096
    """

    name: str
    root: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    memory_mb: int = 1024
    cpu_seconds: int = 600
    max_processes: int = 256
    network: bool = False
    cpu_count: int = 1
    disk_mb: int = 1024

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_seconds", "max_processes", "cpu_count", "disk_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(
                    f"template {self.name!r}: {name} must be a positive integer, got {value!r}"
                )
        if not Path(self.root).is_absolute():
            raise ValueError(
                f"template {self.name!r}: root must be an absolute path, got {self.root!r}"
            )

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Template:
        """Build a template from one entry of a templates file, rejecting unknown keys."""
        if not isinstance(data, dict):
            raise ValueError(f"template {name!r} must be a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)} - {"name"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"template {name!r}: unknown keys {unknown}; allowed: {sorted(known)}")
        data = dict(data)
        data["env"] = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
        setup = data.get("setup") or ()
        data["setup"] = (setup,) if isinstance(setup, str) else tuple(str(c) for c in setup)
        return cls(name=name, **data)


@dataclass(slots=True)
class TemplateRegistry:
    """Templates by name, with ``base`` built in.

    Args:
        templates: the configured templates (a ``base`` entry here overrides the built-in one).
        allow_unknown: answer unknown names with ``base`` (under the asked name), not an error.

    Example:
        >>> reg = TemplateRegistry()
        >>> reg.get('base').name
        'base'
    """

    templates: dict[str, Template] = field(default_factory=dict)
    allow_unknown: bool = False

    def __post_init__(self) -> None:
        self.templates.setdefault(BASE_TEMPLATE, Template(name=BASE_TEMPLATE))

    def get(self, name: str) -> Template:
        """The template called ``name``; KeyError with the known names if there is none."""
        if name in self.templates:
            return self.templates[name]
        if self.allow_unknown:
            return dataclasses.replace(self.templates[BASE_TEMPLATE], name=name)
        raise KeyError(f"template {name!r} not found; known templates: {sorted(self.templates)}")

    @classmethod
    def from_file(cls, path: str | Path) -> TemplateRegistry:
        """Read a YAML or JSON templates file (see the module docstring for its shape)."""
        import yaml

        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping with a 'templates' key")
        unknown = sorted(set(data) - {"templates", "allow_unknown"})
        if unknown:
            raise ValueError(
                f"{path}: unknown keys {unknown}; allowed: ['allow_unknown', 'templates']"
            )
        entries = data.get("templates") or {}
        if not isinstance(entries, dict):
            raise ValueError(f"{path}: 'templates' must map names to settings")
        templates = {
            str(name): Template.from_dict(str(name), spec or {}) for name, spec in entries.items()
        }
        return cls(templates=templates, allow_unknown=bool(data.get("allow_unknown", False)))
