"""Run a task's tests against a model's files, in a sandbox, without trusting the workspace.

Two backends share one grading protocol:

* :class:`SubprocessRunner` - a fresh temporary directory and a child Python process with
  ``resource.setrlimit`` limits (CPU seconds, address space, file size, no core dumps; set
  by the grader before the solution is imported), a
  wall-clock timeout that kills the whole process group, isolated mode (``-I``) and an empty
  environment. The default when no sandbox server is configured.
* :class:`AgentEnvRunner` - the same grading inside an E2B-compatible sandbox through
  :class:`twinkle.envs.agentenv.AgentEnv` (the local ``twinkle.sandbox`` server, AgentENV or
  E2B), either in a fresh sandbox or in the one a rollout just used (:meth:`run_in`).

Why a policy cannot score itself: the model's files are written first and the pristine
grader and test cases are copied in *after* them (overwriting anything the model put at
those paths). The grader reads the tests and a one-time nonce file, deletes the nonce, and
only then imports the model's module. It reports each call's *value* in a type-tagged
encoding on a nonce-marked line; the comparison with the expected values happens here, in
the scoring process. A tampered test file, a ``reward.txt``, ``sys.exit(0)``, printing
"PASSED", or an object whose ``__eq__`` always returns True therefore score nothing. (Code
that reads the grader's own memory is out of scope: that is what the sandbox boundary is
for.)

Example:
    >>> runner = SubprocessRunner(timeout=10)
    >>> out = runner.run({"solution.py": "def add(a, b):\\n    return a + b\\n"},
    ...                  [TestCase("add(2, 3)", "5")])
    >>> (out.passed, out.total, out.status)
    (1, 1, 'ok')
"""

from __future__ import annotations

import ast
import json
import math
import os
import posixpath
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "AgentEnvRunner",
    "RunOutcome",
    "SandboxRunner",
    "SubprocessRunner",
    "TestCase",
    "compare_values",
    "encode_value",
]

GRADER_DIR = ".twinkle_grader"
_MARK = "TWINKLE-RESULT-"
_MAX_OUTPUT = 4000

# The grader runs inside the sandbox. It must not trust anything the solution can touch
# after import, so it only records values; the verdict is computed by the caller.
_GRADER = r"""
import json, os, sys
_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(_here)
with open(os.path.join(_here, "tests.json")) as _f:
    _spec = json.load(_f)
if _spec.get("limits"):
    import resource
    for _name, _value in _spec["limits"].items():
        resource.setrlimit(getattr(resource, _name), (_value, _value))
with open(os.path.join(_here, "nonce")) as _f:
    _nonce = _f.read().strip()
os.remove(os.path.join(_here, "nonce"))
_write = sys.__stdout__.write
_flush = sys.__stdout__.flush
_dumps = json.dumps
_type, _repr, _isinstance, _eval = type, repr, isinstance, eval
_exc_base = BaseException

def _enc(v, depth=0):
    t = _type(v)
    if depth > 50:
        return ["other", "too deep"]
    if v is None:
        return ["none", None]
    if t is bool:
        return ["bool", v]
    if t is int:
        return ["int", str(v)]
    if t is float:
        return ["float", _repr(v)]
    if t is str:
        return ["str", v]
    if t is list or t is tuple or t is set or t is frozenset:
        items = [_enc(x, depth + 1) for x in v]
        if t is set or t is frozenset:
            items.sort(key=_dumps)
        return [t.__name__, items]
    if t is dict:
        return ["dict", [[_enc(k, depth + 1), _enc(x, depth + 1)] for k, x in v.items()]]
    return ["other", t.__name__]

sys.path.insert(0, _root)
_results = []
try:
    _ns = {}
    exec("from %s import *" % _spec["module"], _ns)
    _import_error = None
except _exc_base as e:
    _import_error = "%s: %s" % (_type(e).__name__, e)
for _case in _spec["calls"]:
    if _import_error is not None:
        _results.append({"error": "import failed: " + _import_error})
        continue
    try:
        _results.append({"value": _enc(_eval(_case, dict(_ns)))})
    except _exc_base as e:
        _results.append({"error": "%s: %s" % (_type(e).__name__, str(e)[:300])})
_write("\n" + _spec["mark"] + _nonce + _dumps(_results) + "\n")
_flush()
"""


@dataclass(frozen=True)
class TestCase:
    """One check: a Python expression calling the solution, and the expected value.

    ``expected`` is a Python literal (``ast.literal_eval``), e.g. ``"[1, 2]"`` or ``"True"``.

    Example:
        >>> TestCase.from_dict({"call": "add(1, 2)", "expected": 3})
        TestCase(call='add(1, 2)', expected='3')
    """

    __test__ = False  # not a pytest class

    call: str
    expected: str

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TestCase:
        return cls(call=str(raw["call"]), expected=str(raw["expected"]))


@dataclass(frozen=True)
class RunOutcome:
    """Result of grading: how many cases passed, and why the others did not.

    ``status`` is ``"ok"`` (the grader reported), ``"timeout"``, or ``"error"`` (the grader
    produced no trusted result: crash, killed, sandbox failure).

    Example:
        >>> RunOutcome(passed=2, total=2, status="ok").all_passed
        True
        >>> RunOutcome(passed=0, total=0, status="ok").all_passed  # no tests proves nothing
        False
    """

    passed: int
    total: int
    status: str
    failures: tuple[str, ...] = ()
    output: str = ""
    backend: str = ""
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def all_passed(self) -> bool:
        return self.status == "ok" and self.total > 0 and self.passed == self.total

    @classmethod
    def failed(
        cls, status: str, reason: str, total: int, backend: str, seconds: float, output: str = ""
    ) -> RunOutcome:
        """No case passed: the grader timed out or gave no trusted result (``reason``).

        Example:
            >>> RunOutcome.failed("error", "sandbox failure: gone", 3, "local", 0.1).failures
            ('sandbox failure: gone',)
        """
        return cls(0, total, status, (reason,), output[-_MAX_OUTPUT:], backend, seconds)


class SandboxRunner(Protocol):
    """Anything that grades ``files`` against ``tests``.

    Example:
        >>> class Refuse:
        ...     name = "refuse"
        ...     def run(self, files, tests, module="solution"):
        ...         return RunOutcome(0, len(tests), "error", failures=("no sandbox",))
        >>> Refuse().run({"solution.py": ""}, [TestCase("f()", "1")]).status
        'error'
    """

    name: str

    def run(
        self, files: Mapping[str, str], tests: Sequence[TestCase], module: str = "solution"
    ) -> RunOutcome: ...


def encode_value(value: Any, depth: int = 0) -> list[Any]:
    """The grader's type-tagged encoding of a plain Python value (for expected values)."""
    t = type(value)
    if value is None:
        return ["none", None]
    if t is bool:
        return ["bool", value]
    if t is int:
        return ["int", str(value)]
    if t is float:
        return ["float", repr(value)]
    if t is str:
        return ["str", value]
    if t in (list, tuple, set, frozenset):
        items = [encode_value(x, depth + 1) for x in value]
        if t in (set, frozenset):
            items.sort(key=json.dumps)
        return [t.__name__, items]
    if t is dict:
        return ["dict", [[encode_value(k), encode_value(v)] for k, v in value.items()]]
    return ["other", t.__name__]


def _number(tagged: list[Any]) -> float | int | None:
    tag, raw = tagged
    if tag == "int":
        return int(raw)
    if tag == "float":
        return float(raw)
    return None


def compare_values(actual: list[Any], expected: list[Any]) -> bool:
    """Strict, type-aware equality of two encoded values.

    Exact builtin types only (a subclass never matches, so ``__eq__`` tricks fail); ints and
    floats compare numerically with a relative tolerance of 1e-9; bool is not a number.
    """
    if not (isinstance(actual, list) and len(actual) == 2):
        return False
    a_tag, a_val = actual
    e_tag, e_val = expected
    if a_tag in ("int", "float") and e_tag in ("int", "float"):
        a, e = _number(actual), _number(expected)
        if a_tag == e_tag == "int":
            return a == e
        return math.isclose(a, e, rel_tol=1e-9, abs_tol=1e-12)
    if a_tag != e_tag or a_tag == "other":
        return False
    if a_tag in ("list", "tuple", "set", "frozenset"):
        return len(a_val) == len(e_val) and all(map(compare_values, a_val, e_val))
    if a_tag == "dict":
        if len(a_val) != len(e_val):
            return False
        expected_items = {json.dumps(k): v for k, v in e_val}
        for k, v in a_val:
            key = json.dumps(k)
            if key not in expected_items or not compare_values(v, expected_items[key]):
                return False
        return True
    return a_val == e_val


def _grader_files(
    tests: Sequence[TestCase], module: str, nonce: str, limits: Mapping[str, int] | None = None
) -> dict[str, str]:
    spec = {
        "module": module,
        "calls": [t.call for t in tests],
        "mark": _MARK,
        "limits": dict(limits or {}),
    }
    return {
        f"{GRADER_DIR}/grade.py": _GRADER,
        f"{GRADER_DIR}/tests.json": json.dumps(spec),
        f"{GRADER_DIR}/nonce": nonce,
    }


def _verdict(
    stdout: str,
    nonce: str,
    tests: Sequence[TestCase],
    backend: str,
    seconds: float,
    output: str,
) -> RunOutcome:
    """Compare the nonce-marked report with the expected values."""
    marker = _MARK + nonce
    line = None
    for candidate in stdout.splitlines():
        if candidate.startswith(marker):
            line = candidate[len(marker) :]
    if line is None:
        return RunOutcome.failed(
            "error", "grader produced no result", len(tests), backend, seconds, output
        )
    try:
        results = json.loads(line)
    except ValueError:
        return RunOutcome.failed(
            "error", "unreadable grader result", len(tests), backend, seconds, output
        )
    passed, failures = 0, []
    for case, result in zip(tests, results):
        if "error" in result:
            failures.append(f"{case.call}: {result['error']}")
            continue
        try:
            expected = encode_value(ast.literal_eval(case.expected))
        except (ValueError, SyntaxError) as exc:
            failures.append(f"{case.call}: bad expected literal {case.expected!r} ({exc})")
            continue
        if compare_values(result.get("value"), expected):
            passed += 1
        else:
            failures.append(f"{case.call}: expected {case.expected}, got {result.get('value')}")
    if len(results) != len(tests):
        failures.append(f"grader reported {len(results)} results for {len(tests)} cases")
    return RunOutcome(
        passed, len(tests), "ok", tuple(failures), output[-_MAX_OUTPUT:], backend, seconds
    )


def _safe_relpath(path: str) -> str | None:
    """A workspace-relative path, or None when it would escape the workspace."""
    norm = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    if not norm or norm == "." or norm.startswith("..") or "\x00" in norm:
        return None
    return norm


def _write(root: str, path: str, content: str) -> None:
    rel = _safe_relpath(path)
    if rel is None:
        return
    full = os.path.join(root, rel)
    if os.path.isdir(full):
        shutil.rmtree(full)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(content)


class SubprocessRunner:
    """Grade in a temporary directory with a resource-limited child Python process.

    Args:
        timeout: wall-clock seconds before the process group is killed.
        memory_mb: address-space limit of the child.
        cpu_seconds: CPU-time limit (defaults to ``timeout`` + 1).
        python: interpreter to run the grader with.

    Example:
        >>> SubprocessRunner(timeout=5).run({"solution.py": "import sys; sys.exit(0)"},
        ...                                 [TestCase("f()", "1")]).passed
        0
    """

    name = "subprocess"

    def __init__(
        self,
        timeout: float = 10.0,
        memory_mb: int = 1024,
        cpu_seconds: int | None = None,
        python: str | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.cpu_seconds = cpu_seconds or int(timeout) + 1
        self.python = python or sys.executable

    def _limits(self) -> dict[str, int]:
        # Applied by the (pristine) grader itself before it imports the solution: a
        # preexec_fn would do it earlier but is unsafe in a threaded scorer.
        return {
            "RLIMIT_CPU": self.cpu_seconds,
            "RLIMIT_AS": self.memory_mb * 1024 * 1024,
            "RLIMIT_FSIZE": 16 * 1024 * 1024,
            "RLIMIT_CORE": 0,
        }

    def run(
        self, files: Mapping[str, str], tests: Sequence[TestCase], module: str = "solution"
    ) -> RunOutcome:
        start = time.perf_counter()
        nonce = secrets.token_hex(16)
        workdir = tempfile.mkdtemp(prefix="twinkle-grade-")
        try:
            # The model's files first (one that cannot be written is skipped), then the
            # pristine grader in a directory cleared of whatever the model put there.
            for path, content in files.items():
                try:
                    _write(workdir, path, content)
                except OSError:
                    continue
            grader_dir = os.path.join(workdir, GRADER_DIR)
            if os.path.isdir(grader_dir) and not os.path.islink(grader_dir):
                shutil.rmtree(grader_dir)
            elif os.path.lexists(grader_dir):
                os.remove(grader_dir)
            for path, content in _grader_files(tests, module, nonce, self._limits()).items():
                _write(workdir, path, content)
            proc = subprocess.Popen(
                [self.python, "-I", os.path.join(workdir, GRADER_DIR, "grade.py")],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={"PATH": "/usr/bin:/bin", "HOME": workdir, "PYTHONHASHSEED": "0"},
                start_new_session=True,
            )
            try:
                out, err = proc.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                text = (out + err).decode("utf-8", "replace")
                return RunOutcome.failed(
                    "timeout",
                    f"timed out after {self.timeout}s",
                    len(tests),
                    self.name,
                    time.perf_counter() - start,
                    text,
                )
            finally:
                # Children the solution spawned in its own session die with the group.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            stdout = out.decode("utf-8", "replace")
            text = stdout + err.decode("utf-8", "replace")
            return _verdict(stdout, nonce, tests, self.name, time.perf_counter() - start, text)
        except OSError as exc:
            return RunOutcome.failed(
                "error",
                f"sandbox failure: {exc}",
                len(tests),
                self.name,
                time.perf_counter() - start,
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


class AgentEnvRunner:
    """Grade inside an E2B-compatible sandbox through ``twinkle.envs.agentenv.AgentEnv``.

    Args:
        template: sandbox template for fresh sandboxes.
        api_url: the sandbox server (e.g. the local ``twinkle sandbox serve``); None uses the
            ``E2B_API_URL`` the SDK reads.
        api_key: the server's API key (None: ``E2B_API_KEY``).
        timeout: seconds the grader may run.
        workdir: the workspace directory inside the sandbox.
        env_kwargs: extra ``AgentEnv`` constructor arguments.

    Example:
        >>> runner = AgentEnvRunner(api_url="http://127.0.0.1:49983")  # doctest: +SKIP
        >>> runner.run({"solution.py": src}, cases).passed                # doctest: +SKIP
    """

    name = "agentenv"

    def __init__(
        self,
        template: str = "base",
        api_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        workdir: str = "/tmp/twinkle-task",
        python: str = "python3",
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.template = template
        self.api_url = api_url
        self.api_key = api_key
        self.timeout = timeout
        self.workdir = workdir.rstrip("/")
        self.python = python
        self.env_kwargs = dict(env_kwargs or {})

    def _new_env(self) -> Any:
        from twinkle.envs.agentenv import AgentEnv

        return AgentEnv(
            self.template, api_url=self.api_url, api_key=self.api_key, **self.env_kwargs
        )

    def run(
        self, files: Mapping[str, str], tests: Sequence[TestCase], module: str = "solution"
    ) -> RunOutcome:
        start = time.perf_counter()
        try:
            env = self._new_env()
        except Exception as exc:  # noqa: BLE001 - missing extra, bad config: grading failed, not the model
            return RunOutcome.failed(
                "error",
                f"sandbox failure: {exc}",
                len(tests),
                self.name,
                time.perf_counter() - start,
            )
        try:
            env.reset()
            sandbox = env.sandbox
            sandbox.commands.run(f"rm -rf {self.workdir} && mkdir -p {self.workdir}", timeout=30)
            for path, content in files.items():
                rel = _safe_relpath(path)
                if rel is None:
                    continue
                try:
                    sandbox.files.write(f"{self.workdir}/{rel}", content)
                except Exception:  # noqa: BLE001 - e.g. a path under a file: skip it, as locally
                    continue
            return self._grade(sandbox, tests, module, start)
        except Exception as exc:  # noqa: BLE001 - a sandbox failure is an error outcome
            return RunOutcome.failed(
                "error",
                f"sandbox failure: {exc}",
                len(tests),
                self.name,
                time.perf_counter() - start,
            )
        finally:
            env.close()

    def run_in(self, env: Any, tests: Sequence[TestCase], module: str = "solution") -> RunOutcome:
        """Grade the workspace a rollout left behind in ``env``'s sandbox (after its last
        action)."""
        start = time.perf_counter()
        try:
            return self._grade(env.sandbox, tests, module, start)
        except Exception as exc:  # noqa: BLE001 - as in run()
            return RunOutcome.failed(
                "error",
                f"sandbox failure: {exc}",
                len(tests),
                self.name,
                time.perf_counter() - start,
            )

    def _grade(
        self, sandbox: Any, tests: Sequence[TestCase], module: str, start: float
    ) -> RunOutcome:
        nonce = secrets.token_hex(16)
        sandbox.commands.run(f"rm -rf {self.workdir}/{GRADER_DIR}", timeout=30)
        for path, content in _grader_files(tests, module, nonce).items():
            sandbox.files.write(f"{self.workdir}/{path}", content)
        cmd = (
            f"cd {self.workdir} && timeout -s KILL {int(self.timeout)} "
            f"{self.python} -I {GRADER_DIR}/grade.py"
        )
        try:
            result = sandbox.commands.run(cmd, timeout=self.timeout + 30)
            stdout, stderr, code = result.stdout, result.stderr, result.exit_code
        except Exception as exc:
            # The SDK raises on a non-zero exit; its exception still carries the output.
            if not hasattr(exc, "exit_code"):
                raise
            stdout = getattr(exc, "stdout", "") or ""
            stderr = getattr(exc, "stderr", "") or ""
            code = exc.exit_code
        seconds = time.perf_counter() - start
        if code in (124, 137) and _MARK not in stdout:
            return RunOutcome.failed(
                "timeout",
                f"timed out after {self.timeout}s",
                len(tests),
                self.name,
                seconds,
                (stdout + stderr),
            )
        return _verdict(stdout, nonce, tests, self.name, seconds, stdout + stderr)
