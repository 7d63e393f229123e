"""The seed documents, checked line by line: the project's own conformance suite.

Every Python example of the four seed documents (``shared/seeds``: agentic.md, envs.md,
envs-earlier.md, llenvs-core-api.md) is extracted, its module paths mapped as the seeds'
README says (``twinkle_agentic.X`` and ``llenvs.X`` become ``twinkle.X``), and run page by
page in a fresh interpreter, one statement at a time, in one namespace per page, as a reader
follows the page. An example passes, or fails only with an error in ``ALLOWED``: a one-line
"needs X installed or started" message, each entry with its reason. A comment that states a
value (``# answer = "42"``) is checked against the value.

Two kinds of text are not run but compared with twinkle: declarations (class stubs of the
documented types, e.g. ``@dataclass(frozen=True) class State``: fields in order, frozen
flags, method signatures, protocol members), and the signatures in the pages' tables
(``SIGNATURES``). Names a page leaves to the reader (``rows``, ``vllm_sampler``,
``MyEnv``...) get small stand-ins (``STAND_INS``); ``...`` placeholders become empty values.

Run as a script, this file is the child that executes one page (``python
tests/test_seed_conformance.py < page.json``).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("agentic.md", "envs.md", "envs-earlier.md", "llenvs-core-api.md")


def _seed_dir() -> Path | None:
    """``$TWINKLE_SEEDS``, else the copy in ``docs/seeds`` (the specification, kept in the repo)."""
    env = os.environ.get("TWINKLE_SEEDS")
    for candidate in (env, ROOT / "docs" / "seeds"):
        if candidate and (Path(candidate) / "agentic.md").is_file():
            return Path(candidate)
    return None


SEEDS = _seed_dir()


# --- extraction -------------------------------------------------------------------------------
# The pages are text exports: only envs-earlier.md keeps Markdown fences, and agentic.md lost
# its indentation (every nested line starts with one space). A code block is a run of
# paragraphs that parses as Python; flattened blocks are re-indented first.


def _scan(line: str, depth: int, quote: str | None) -> tuple[int, str | None]:
    """Bracket depth and open triple quote after ``line`` (strings and comments skipped)."""
    i = 0
    while i < len(line):
        if quote:
            if line.startswith(quote, i):
                i, quote = i + 3, None
            else:
                i += 2 if line[i] == "\\" else 1
            continue
        c = line[i]
        if c == "#":
            break
        if line.startswith(('"""', "'''"), i):
            quote, i = line[i : i + 3], i + 3
            continue
        if c in "'\"":
            j = i + 1
            while j < len(line) and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            continue
        depth += (c in "([{") - (c in ")]}")
        i += 1
    return depth, quote


def reindent(text: str) -> str:
    """Rebuild the indentation of a block whose nested lines all start with one space.

    A line after a block opener (``...:``) goes one level deeper; ``def``/``class``/``@`` lines
    inside a class go back to the class body; other lines keep the level of the line before.
    """
    out: list[str] = []
    classes: list[int] = []
    level = prev = depth = 0
    quote: str | None = None
    opener = False
    for raw in text.split("\n"):
        s = raw.strip()
        if depth or quote or not s or s.startswith("#"):
            out.append("    " * (level + bool(depth or quote)) + s if s else "")
            if depth or quote:
                depth, quote = _scan(s, depth, quote)
                opener = not (depth or quote) and s.split("#")[0].rstrip().endswith(":")
            continue
        if not raw.startswith(" "):
            level = 0
        elif opener:
            level = prev + 1
        elif re.match(r"(@|def |async def |class )", s) and any(c < prev for c in classes):
            level = max(c for c in classes if c < prev) + 1
        else:
            level = prev
        classes = [c for c in classes if c < level]
        if s.startswith("class "):
            classes.append(level)
        out.append("    " * level + s)
        depth, quote = _scan(s, 0, None)
        opener = not (depth or quote) and s.split("#")[0].rstrip().endswith(":")
        prev = level
    return "\n".join(out)


def parse(text: str) -> tuple[str, ast.Module] | None:
    text = re.sub(r", \.\.\.\)", ", **more)", text)  # "(reward, name='reward', ...)" in a stub
    for candidate in (textwrap.dedent(text), reindent(text)):
        try:
            return candidate, ast.parse(candidate)
        except SyntaxError:
            pass
    return None


def _trivial(stmt: ast.stmt) -> bool:
    """Prose that happens to parse: ``Parameters``, ``Agentic | Twinkle``, ``Location: a/b.py``."""
    if isinstance(stmt, ast.AnnAssign):
        return stmt.value is None
    if isinstance(stmt, ast.Expr):
        allowed = (ast.Name, ast.Attribute, ast.BinOp, ast.Load, ast.operator)
        return all(isinstance(n, allowed) for n in ast.walk(stmt.value))
    return False


def _prose(para: str) -> bool:
    if re.fullmatch(r"[A-Z][\w ]*\([\w ]+\)", para.strip()):  # a heading: "Environments (Envs)"
        return True
    parsed = parse(para)
    return parsed is not None and bool(parsed[1].body) and all(map(_trivial, parsed[1].body))


@dataclasses.dataclass
class Block:
    page: str
    line: int
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def extract(page: str, text: str) -> list[Block]:
    if re.search(r"^```python$", text, re.M):
        return [
            Block(page, text[: m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S)
        ]
    paras: list[tuple[int, str]] = []
    for m in re.finditer(r"(?:^[^\n]*\S[^\n]*(?:\n|$))+", text, re.M):
        paras.append((text[: m.start()].count("\n") + 1, m.group(0).rstrip("\n")))
    blocks, i = [], 0
    while i < len(paras):
        best = None
        for j in range(i + 1, min(len(paras), i + 15) + 1):
            if _prose(paras[j - 1][1]):
                break
            parsed = parse("\n\n".join(p for _, p in paras[i:j]))
            if parsed and not all(map(_trivial, parsed[1].body)) and parsed[1].body:
                best = (j, parsed[0])
        if best:
            blocks.append(Block(page, paras[i][0], best[1]))
            i = best[0]
        else:
            i += 1
    return blocks


@cache
def page_blocks(page: str) -> tuple[Block, ...]:
    assert SEEDS is not None
    return tuple(extract(page, (SEEDS / page).read_text(encoding="utf-8")))


# --- declarations: class stubs of documented types ------------------------------------------

#: Documented class name -> twinkle object, per page (the seeds' module paths, mapped).
_AGENTIC_TYPES = {
    "API": "twinkle.protocol.base:API",
    "Rollout": "twinkle.rollout.base:Rollout",
    "Tool": "twinkle.tools.base:Tool",
    "Env": "twinkle.envs.base:Env",
    "StepResult": "twinkle.envs.base:StepResult",
}
_CORE_TYPES = {
    "twinkle.core.state": ("State", "StateMetadata", "ObservationContent", "Observation", "Action"),
    "twinkle.core.environment": ("Environment", "StepResult", "EnvironmentSpec"),
    "twinkle.core.signals": ("RewardType", "Signal", "SignalBundle", "RewardFunction"),
    "twinkle.core.judge": ("JudgeReward",),
    "twinkle.core.trajectory": ("Trajectory", "Transition", "Checkpoint"),
    "twinkle.core.branching": ("BranchingStrategy",),
    "twinkle.core.extraction": ("AnswerExtractor",),
}
DECLARED = {
    "agentic.md": _AGENTIC_TYPES,
    "envs.md": _AGENTIC_TYPES,
    "envs-earlier.md": _AGENTIC_TYPES,
    "llenvs-core-api.md": {n: f"{m}:{n}" for m, names in _CORE_TYPES.items() for n in names},
}
#: Implementations that must offer a documented protocol's methods with its signatures.
IMPLEMENTATIONS = {
    "BranchingStrategy": [
        f"twinkle.core.branching:{n}"
        for n in ("DirectStrategy", "ProcessForkStrategy", "ActionReplayStrategy")
    ],
    "AnswerExtractor": [
        f"twinkle.core.extraction:{n}"
        for n in (
            "TagBasedExtractor",
            "RegexExtractor",
            "GSM8KExtractor",
            "MultipleChoiceExtractor",
            "BoxedExtractor",
            "NumericExtractor",
            "LastLineExtractor",
            "CodeBlockExtractor",
            "PatternAnswerExtractor",
            "CompositeExtractor",
            "RawGenerationExtractor",
            "NativeExtractor",
            "CleanedExtractor",
        )
    ],
}


def load(path: str) -> Any:
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = inspect.getattr_static(obj, part) if isinstance(obj, type) else getattr(obj, part)
    return obj


def declarations(block: Block) -> list[ast.ClassDef] | None:
    """The class stubs of ``block`` when it is a declaration (imports + documented classes)."""
    tree = ast.parse(block.code)
    classes = [s for s in tree.body if isinstance(s, ast.ClassDef)]
    rest = [s for s in tree.body if not isinstance(s, (ast.ClassDef, ast.Import, ast.ImportFrom))]
    names = DECLARED[block.page]
    if classes and not rest and all(c.name in names for c in classes):
        return classes
    return None


def _decorators(node: ast.AST) -> set[str]:
    return {ast.unparse(d).split("(")[0] for d in getattr(node, "decorator_list", [])}


def check_signature(doc: ast.arguments, actual: Any, what: str) -> list[str]:
    """Where ``actual`` (a callable) disagrees with the documented parameters ``doc``."""
    try:
        sig = inspect.signature(actual)
    except (TypeError, ValueError):
        return [f"{what}: no signature"]
    params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    kinds = inspect.Parameter
    positional = [
        p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    by_name = {p.name: p for p in params}
    doc_pos = [a for a in doc.posonlyargs + doc.args if a.arg not in ("self", "cls")]
    defaults = dict(zip([a.arg for a in doc_pos][::-1], doc.defaults[::-1]))
    defaults.update({a.arg: d for a, d in zip(doc.kwonlyargs, doc.kw_defaults) if d is not None})
    problems = []
    got = [p.name for p in positional[: len(doc_pos)]]
    if got != [a.arg for a in doc_pos]:
        problems.append(f"{what}: positional {got} != documented {[a.arg for a in doc_pos]}")
    for arg in doc.kwonlyargs:
        p = by_name.get(arg.arg)
        if p is None or p.kind not in (kinds.KEYWORD_ONLY, kinds.POSITIONAL_OR_KEYWORD):
            problems.append(f"{what}: no keyword parameter {arg.arg!r}")
    for name, node in defaults.items():
        p = by_name.get(name)
        if p is None or p.default is p.empty:
            problems.append(f"{what}: {name!r} has no default (documented {ast.unparse(node)})")
            continue
        try:
            value = ast.literal_eval(node)
        except ValueError:
            continue
        if p.default != value:
            problems.append(f"{what}: {name}={p.default!r}, documented {value!r}")
    takes_kwargs = any(p.kind == kinds.VAR_KEYWORD for p in params)
    if doc.kwarg and doc.kwarg.arg != "more" and not takes_kwargs:
        problems.append(f"{what}: takes no **{doc.kwarg.arg}")
    documented = {a.arg for a in doc_pos + doc.kwonlyargs}
    for p in params[len(doc_pos) :]:
        required = p.default is p.empty and p.kind in (
            kinds.POSITIONAL_OR_KEYWORD,
            kinds.KEYWORD_ONLY,
        )
        if required and p.name not in documented:
            problems.append(f"{what}: undocumented required parameter {p.name!r}")
    return problems


def check_members(stub: ast.ClassDef, cls: Any, what: str) -> list[str]:
    problems = []
    for node in stub.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        name, decorators = node.name, _decorators(node)
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            fields = (
                {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else ()
            )
            if name not in fields:
                problems.append(f"{what}.{name}: missing")
            continue
        if "property" in decorators:
            if inspect.isfunction(attr) or isinstance(attr, (classmethod, staticmethod)):
                problems.append(f"{what}.{name}: a method, documented as a property")
            continue
        if "classmethod" in decorators and not isinstance(attr, classmethod):
            problems.append(f"{what}.{name}: not a classmethod")
        problems += check_signature(node.args, getattr(cls, name), f"{what}.{name}")
    return problems


def check_declaration(page: str, stub: ast.ClassDef) -> list[str]:
    cls = load(DECLARED[page][stub.name])
    what = f"{DECLARED[page][stub.name]}"
    problems = []
    decorators = {ast.unparse(d) for d in stub.decorator_list}
    defines_init = any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in stub.body)
    if decorators & {"dataclass", "dataclass(frozen=True)"} and not defines_init:
        # JudgeReward is the exception: its @dataclass sits over an explicit __init__.
        if not dataclasses.is_dataclass(cls):
            problems.append(f"{what}: not a dataclass")
        elif "dataclass(frozen=True)" in decorators and not cls.__dataclass_params__.frozen:
            problems.append(f"{what}: not frozen")
    fields = [n for n in stub.body if isinstance(n, ast.AnnAssign)]
    if fields and dataclasses.is_dataclass(cls):
        actual = {f.name: f for f in dataclasses.fields(cls)}
        order = [f.name for f in dataclasses.fields(cls)][: len(fields)]
        if order != [ast.unparse(f.target) for f in fields]:
            problems.append(f"{what}: fields {order} != documented order")
        for f in fields:
            field = actual.get(ast.unparse(f.target))
            if f.value is not None and field is not None:
                missing = dataclasses.MISSING
                if field.default is missing and field.default_factory is missing:
                    problems.append(f"{what}.{field.name}: documented with a default")
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        names = [ast.unparse(n.targets[0]) for n in stub.body if isinstance(n, ast.Assign)]
        problems += [f"{what}.{n}: missing member" for n in names if n not in cls.__members__]
    problems += check_members(stub, cls, what)
    if getattr(cls, "_is_protocol", False):
        # A class written from the stub, with exactly its members, satisfies the protocol.
        members = {
            n.name: (lambda self, *a, **k: None)
            for n in stub.body
            if isinstance(n, ast.FunctionDef)
        }
        if not isinstance(type("FromSeed", (), members)(), cls):
            problems.append(f"{what}: a class with exactly the documented members is not one")
        for impl in IMPLEMENTATIONS.get(stub.name, []):
            problems += check_members(stub, load(impl), impl)
    return problems


# --- signatures from the pages' tables and prose --------------------------------------------

#: (page, twinkle callable, documented signature). Method tables and prose give explicit
#: signatures, checked positionally; parameter tables give names and stated defaults only, so
#: they are written keyword-only (``*``).
SIGNATURES = [
    ("agentic.md", "twinkle.preprocessor:QualityPreprocessor", "(pipeline, *, dropped_log_path)"),
    ("agentic.md", "twinkle.preprocessor:DedupFilter", "(*, prefix_chars, asst_chars)"),
    ("agentic.md", "twinkle.preprocessor:RefuseFilter", "(*, check_window)"),
    ("agentic.md", "twinkle.preprocessor:ModelFilter", "(*, allowed_models)"),
    (
        "agentic.md",
        "twinkle.protocol.openai:OpenAI",
        "(*, model, api_key, base_url, client_kwargs)",
    ),
    (
        "agentic.md",
        "twinkle.rollout.multi_turn:MultiTurnRollout",
        "(*, sampler, template, tool_manager, sampling_params, max_turns=6, "
        "max_trajectory_tokens, trace_dir, trace_callback, success_callback)",
    ),
    (
        "agentic.md",
        "twinkle.rollout.api_multi_turn:APIMultiTurnRollout",
        "(*, api, tool_manager, sampling_params, max_turns=6, concurrency=8, extra_body, "
        "trace_dir, trace_callback, success_callback)",
    ),
    ("agentic.md", "twinkle.tools.tool_manager:ToolManager.register", "(tool)"),
    ("agentic.md", "twinkle.tools.tool_manager:ToolManager.unregister", "(name)"),
    ("agentic.md", "twinkle.tools.tool_manager:ToolManager.names", "()"),
    ("agentic.md", "twinkle.tools.tool_manager:ToolManager.copy", "()"),
    ("agentic.md", "twinkle.tools.tool_manager:ToolManager.tool_infos", "()"),
    ("agentic.md", "twinkle.tools.tool_manager:ToolManager.__call__", "(tool_call)"),
    ("agentic.md", "twinkle.envs.env_tool:EnvTool", "(*, env, tool_name, description, parameters)"),
    ("agentic.md", "twinkle.envs.env_tool:EnvTool.from_env", "(env)"),
    (
        "envs-earlier.md",
        "twinkle.envs.openenv:OpenEnv",
        "(*, base_url, env_cls, env_kwargs, tool_schema, action_mapper)",
    ),
    ("envs.md", "twinkle.envs.openenv:OpenEnv", "(*, env_name, env_kwargs)"),
    ("envs.md", "twinkle.envs.openenv:OpenEnvClient", "(*, env_name, base_url, message_timeout_s)"),
    ("envs.md", "twinkle.envs.openenv:OpenEnvClient.register_tool", "(tool_info, handler)"),
    ("envs.md", "twinkle.envs.openenv:OpenEnvClient.execute", "(action)"),
    (
        "envs.md",
        "twinkle.envs.agentenv:AgentEnv",
        "(*, template, api_url, sandbox_timeout, include_default_tools)",
    ),
    ("envs.md", "twinkle.envs.agentenv:AgentEnv.run_command", "(arguments)"),
    ("envs.md", "twinkle.envs.openenv:EnvPool", "(*, pool_size, device_mesh, env_kwargs)"),
    (
        "llenvs-core-api.md",
        "twinkle.core.judge:JudgeReward.compute",
        "(state, action, next_state)",
    ),
    (
        "llenvs-core-api.md",
        "twinkle.core.branching:BranchManager.create",
        "(env, strategy=None, env_factory=None)",
    ),
    (
        "llenvs-core-api.md",
        "twinkle.core.branching:BranchManager.checkpoint",
        "(name, state, actions, reset_options)",
    ),
    ("llenvs-core-api.md", "twinkle.core.branching:BranchManager.branch", "(name)"),
    ("llenvs-core-api.md", "twinkle.core.branching:BranchManager.release", "(name)"),
    ("llenvs-core-api.md", "twinkle.core.branching:BranchManager.close", "()"),
    (
        "llenvs-core-api.md",
        "twinkle.core.extraction:CleanedExtractor",
        "(*, inner, pre_cleaners, post_cleaners)",
    ),
    ("llenvs-core-api.md", "twinkle.core.extraction:TagBasedExtractor", "(*, tag_name)"),
    ("llenvs-core-api.md", "twinkle.core.extraction:CompositeExtractor", "(*, extractors)"),
    (
        "llenvs-core-api.md",
        "twinkle.core.registry:EnvironmentRegistry.get",
        "(*, name, adapter, **kwargs)",
    ),
    ("llenvs-core-api.md", "twinkle.core.registry:EnvironmentRegistry.list_adapters", "()"),
    ("llenvs-core-api.md", "twinkle.core.registry:EnvironmentRegistry.list_environments", "()"),
    (
        "llenvs-core-api.md",
        "twinkle.core.registry:EnvironmentRegistry.register_adapter",
        "(adapter)",
    ),
    ("llenvs-core-api.md", "twinkle.integrations:Scorer", "(environment)"),
    ("llenvs-core-api.md", "twinkle.integrations:DatasetProvider", "(environment)"),
    ("llenvs-core-api.md", "twinkle.integrations:DatasetProvider.to_hf_dataset", "()"),
    ("llenvs-core-api.md", "twinkle.integrations:TrajectoryMasker", "(tokenizer)"),
    (
        "llenvs-core-api.md",
        "twinkle.integrations:TrajectoryMasker.mask_trajectory",
        "(trajectory)",
    ),
]


# --- running a page (the child process) -------------------------------------------------------

#: Names a page uses but leaves to the reader, with the stand-in a test gives each. A stand-in
#: runs just before the first statement that reads its name while it is still undefined.
_ROW = (
    "{'id': 'r%d', 'messages': [{'role': 'user', 'content': 'How do I count the lines of every "
    "file in a folder?'}, {'role': 'assistant', 'content': 'Run wc -l on the files, then sort "
    "the output numerically so that the biggest file is listed at the end.'}]}"
)
_TEMPLATE = (
    "from twinkle.sampler.template import ChatTemplate\n"
    "from twinkle.testing.tiny_lm import tiny_tokenizer\n"
    "template = ChatTemplate(tiny_tokenizer())\n"
)
_SAMPLER = (
    # A CPU stand-in for the page's vLLM sampler: the rollout API is the same, no GPU needed.
    "from twinkle.sampler import ScriptedSampler\n"
    "{name} = ScriptedSampler(template, lambda ids: 'Paris.')\n"
)
_MY_ENV = '''
from twinkle.envs.base import Env as _Env, StepResult as _StepResult
class MyEnv(_Env):
    """The reader's environment: one 'search' tool that answers."""
    def step(self, tool_name, arguments):
        return _StepResult(observation=f"results for {arguments.get('query')}", reward=1.0)
    def tools(self):
        return [{'type': 'function', 'function': {'name': 'search', 'parameters':
                 {'type': 'object', 'properties': {'query': {'type': 'string'}}}}}]
'''
_TRAJECTORIES = "[{'messages': [{'role': 'user', 'content': 'What is the capital of France?'}]}]"
_API = (
    "from twinkle.protocol.openai import OpenAI\n"
    "api = OpenAI(model='qwen3.5-32b', base_url='http://localhost:8000/v1')\n"
)
_AGENTIC_STAND_INS = {
    "rows": f"rows = {{'id': ['r1', 'r2'], 'messages': [{_ROW % 1}['messages'], "
    f"{_ROW % 2}['messages']]}}",
    "all_rows": f"all_rows = [{_ROW % 1}, {_ROW % 2}, {_ROW % 1}]",
    "template": _TEMPLATE,
    "vllm_sampler": _SAMPLER.format(name="vllm_sampler"),
    "sampler": _SAMPLER.format(name="sampler"),
    "tool_manager": "from twinkle.tools import ToolManager\ntool_manager = ToolManager()",
    "trajectories": f"trajectories = {_TRAJECTORIES}",
    "batch_trajectories": f"batch_trajectories = {_TRAJECTORIES}",
    "trajectory": f"trajectory = {_TRAJECTORIES}[0]",
    "completed_trajectories": f"completed_trajectories = {_TRAJECTORIES}",
    "search_tool": "search_tool = SearchTool()",
    "calculator_tool": (
        "class Calculator(SearchTool):\n"
        "    def tool_info(self):\n"
        "        return {'type': 'function', 'function': {'name': 'calc', 'parameters': {}}}\n"
        "calculator_tool = Calculator()"
    ),
    "MyEnv": _MY_ENV,
    "my_env": _MY_ENV + "my_env = MyEnv()",
    "create_env_for": _MY_ENV + "def create_env_for(traj):\n    return MyEnv()",
    "api": _API,
    # The reader's Ray device mesh: two shards.
    "mesh": "from types import SimpleNamespace\nmesh = SimpleNamespace(world_size=2)",
    # "..." in a call: the rest of the arguments shown above it; the page uses ray unimported.
    "more": "more = {'tool_manager': tool_manager}",
    "ray": "import ray",
    "submit_schema": (
        "submit_schema = {'type': 'function', 'function': {'name': 'submit', 'parameters': "
        "{'type': 'object', 'properties': {'code': {'type': 'string'}}}}}"
    ),
}
_CORE_STAND_INS = {
    # The page's section names the module; its examples use the extractors without imports.
    **dict.fromkeys(
        (
            "TagBasedExtractor",
            "GSM8KExtractor",
            "BoxedExtractor",
            "PatternAnswerExtractor",
            "NumericExtractor",
            "RawGenerationExtractor",
            "CompositeExtractor",
        ),
        "from twinkle.core.extraction import *",
    ),
    "environment": (
        "from twinkle.core.environments import MathEnvironment\n"
        "environment = MathEnvironment(tasks=[{'question': f'{i} + 1?', 'answer': str(i + 1)}"
        " for i in range(3)])"
    ),
    "env": (
        "from twinkle.core.environments import MathEnvironment\n"
        "env = MathEnvironment(tasks=[{'question': '1 + 1?', 'answer': '2'}])"
    ),
    "MyEnv": (
        "from twinkle.core.environments import MathEnvironment\n"
        "def MyEnv():\n    return MathEnvironment(tasks=[{'question': '1 + 1?', 'answer': '2'}])"
    ),
    "state": "state, _ = env.reset(seed=0, options={'task_index': 0})",
    "tokenizer": "from twinkle.testing.tiny_lm import tiny_tokenizer\ntokenizer = tiny_tokenizer()",
    "trajectory": (
        "from twinkle.core import Action, Trajectory, Transition\n"
        "_s0, _ = environment.reset(options={'task_index': 0})\n"
        "_r = environment.step(_s0, Action.from_text('<answer>1</answer>'))\n"
        "trajectory = Trajectory.create(_s0)\n"
        "trajectory.add_transition(Transition(_s0, Action.from_text('<answer>1</answer>'),"
        " _r.next_state, _r.rewards))"
    ),
    "MyCustomAdapter": (
        "class MyCustomAdapter:\n"
        "    name = 'my_custom'\n"
        "    def list_environments(self):\n        return ['one']\n"
        "    def get_environment(self, name, **config):\n        return env\n"
    ),
}
STAND_INS = {
    "agentic.md": _AGENTIC_STAND_INS,
    "envs.md": _AGENTIC_STAND_INS,
    "envs-earlier.md": _AGENTIC_STAND_INS,
    "llenvs-core-api.md": _CORE_STAND_INS,
}

#: The only failures an example may have: something to install or start, named in one line.
ALLOWED = [
    # An optional extra (hf for the tiny tokenizer, pii, ray) is not installed; the message
    # is the pip line.
    (r"^MissingExtraError: .+: pip install ", "an extra to install"),
    # Upstream OpenEnv environments (openspiel_env, coding_env) are not on PyPI; the error
    # names the install from an OpenEnv checkout (README: the same calls with number_guess).
    (r"^ModuleNotFoundError: .+pip install -e <OpenEnv checkout>/envs/\w+", "an OpenEnv env"),
    # The pages' policy model: a vLLM/OpenAI-compatible server on localhost:8000 that is not
    # running here. A direct call raises; a rollout records it on every trajectory.
    (r"^APICallError: .*\bconnection\b", "the model endpoint to start"),
    # The pages' OpenEnv and AgentENV servers (localhost:8000, 10.0.0.5:8000), not running here.
    (r"^ConnectionError: Failed to connect to ws://(localhost|127\.0\.0\.1):8000/", "a server"),
    (r"^ConnectError: .*http://127\.0\.0\.1:8000/.*Connection refused", "a server to start"),
    # ScoreFilter scores with a model's logprobs; the page constructs it bare, and the
    # error names the backend to pass (an OpenAI-compatible endpoint or the HF sampler).
    (r"^TypeError: ScoreFilter needs a model: pass backend=", "a model to give ScoreFilter"),
]
BLOCK_TIMEOUT_S = 120


def _placeholders(code: str) -> str:
    # "(...)", "[...]", "{...}" stand for the reader's values: run them as empty ones.
    return re.sub(r"([(\[{])\.\.\.([)\]}])", lambda m: m.group(1) + m.group(2), code)


def _mapped(code: str) -> str:
    # The seeds' module paths, and their example host 10.0.0.5 (a cluster node) mapped to this
    # machine, where nothing listens on its port: the suite never leaves the machine, and the
    # example fails as it does for a reader whose server is not up.
    code = re.sub(r"\b(twinkle_agentic|llenvs)\.", "twinkle.", code)
    return code.replace("10.0.0.5", "127.0.0.1")


def _loaded_names(node: ast.AST) -> set[str]:
    """Names read when ``node`` runs (function bodies excluded: they run later, if at all)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack += list(getattr(n, "decorator_list", [])) + n.args.defaults
            stack += [d for d in n.args.kw_defaults if d is not None]
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            names.add(n.id)
        stack.extend(ast.iter_child_nodes(n))
    return names


def _expectations(code: str, tree: ast.Module) -> dict[int, list[tuple[str, Any]]]:
    """``# name = value`` comments, keyed by the index of the statement they follow."""
    lines = code.split("\n")
    out: dict[int, list[tuple[str, Any]]] = {}
    for i, stmt in enumerate(tree.body):
        end = tree.body[i + 1].lineno - 1 if i + 1 < len(tree.body) else len(lines)
        for text in lines[stmt.end_lineno : end]:
            m = re.fullmatch(r"\s*#\s*(.+?)\s*(?:=|:)\s*(.+?)\s*", text)
            if not m:
                continue
            try:
                ast.parse(m.group(1), mode="eval")
                value = ast.literal_eval(m.group(2))
            except (SyntaxError, ValueError):
                continue
            out.setdefault(i, []).append((m.group(1), value))
    return out


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def _api_errors(namespace: dict[str, Any], names: set[str]) -> str | None:
    """A rollout result whose trajectories ended in ``api_error`` is a failed example."""
    for name in names:
        value = namespace.get(name)
        if isinstance(value, list) and value and all(isinstance(t, dict) for t in value):
            for t in value:
                if t.get("stop_reason") == "api_error":
                    return str(t.get("error") or "api_error").splitlines()[0]
    return None


def run_page(page: dict[str, Any]) -> list[dict[str, Any]]:
    import signal

    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"example took more than {BLOCK_TIMEOUT_S} s")

    signal.signal(signal.SIGALRM, alarm)
    namespace: dict[str, Any] = {"__name__": "__seed__"}
    stand_ins = STAND_INS[page["page"]]
    results = []
    for block in page["blocks"]:
        code = _placeholders(_mapped(block["code"]))
        if block.get("imports_only"):
            tree = ast.parse(code)
            tree.body = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
            code = ast.unparse(tree)
        tree = ast.parse(code)
        expectations = _expectations(code, tree)
        result: dict[str, Any] = {"line": block["line"], "error": None, "checks": []}
        signal.alarm(BLOCK_TIMEOUT_S)
        try:
            for i, stmt in enumerate(tree.body):
                for name in sorted(_loaded_names(stmt)):
                    if name in stand_ins and name not in namespace:
                        exec(stand_ins[name], namespace)  # a stand-in of this suite
                module = ast.Module(body=[stmt], type_ignores=[])
                exec(compile(module, f"{block['page']}:{block['line']}", "exec"), namespace)
                assigned = {
                    n.id
                    for n in ast.walk(stmt)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                }
                failed = _api_errors(namespace, assigned)
                if failed:
                    result["error"] = failed
                    break
                for expr, value in expectations.get(i, []):
                    got = eval(expr, namespace)  # an expression the page states
                    result["checks"].append([expr, repr(value), repr(got), got == value])
        except BaseException as exc:  # noqa: BLE001 - every failure is reported, one line each
            result["error"] = _first_line(exc)
        finally:
            signal.alarm(0)
        results.append(result)
    return results


@cache
def page_results(page: str) -> dict[int, dict[str, Any]]:
    blocks = []
    for block in page_blocks(page):
        stubs = declarations(block)
        blocks.append(
            {"page": page, "line": block.line, "code": block.code, "imports_only": bool(stubs)}
        )
    # No key anywhere, as the pages write OpenAI(model, base_url); files go to a scratch cwd.
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="twinkle-seed-") as workdir:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve())],
            input=json.dumps({"page": page, "blocks": blocks}),
            capture_output=True,
            text=True,
            cwd=workdir,
            env=env,
            timeout=BLOCK_TIMEOUT_S * max(4, len(blocks) // 3),
        )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["line"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}


# --- the tests ------------------------------------------------------------------------------

# The seeds ship in docs/seeds: their absence is a broken checkout, not a reason to skip.
assert SEEDS is not None, "docs/seeds/*.md are missing: the conformance suite needs them"


def _block_params() -> list[Any]:
    return [pytest.param(b, id=b.id) for page in PAGES for b in page_blocks(page)]


def test_every_page_has_its_examples():
    counts = {page: len(page_blocks(page)) for page in PAGES}
    # Found by the extraction above; a change means the pages or the extraction changed.
    assert counts == {
        "agentic.md": 40,
        "envs.md": 13,
        "envs-earlier.md": 9,
        "llenvs-core-api.md": 27,
    }


@pytest.mark.parametrize("block", _block_params())
def test_seed_example(block: Block):
    stubs = declarations(block)
    if stubs:
        problems = [p for stub in stubs for p in check_declaration(block.page, stub)]
        assert not problems, "\n".join(problems)
    result = page_results(block.page)[block.line]
    wrong = [c for c in result["checks"] if not c[3]]
    assert not wrong, f"stated values differ (expr, documented, got): {wrong}"
    error = result["error"]
    if error is not None:
        reasons = [why for pattern, why in ALLOWED if re.search(pattern, error)]
        assert reasons, (
            f"{block.id} failed with an error that names nothing to install or start:\n{error}"
        )


@pytest.mark.parametrize(
    "page, target, documented", SIGNATURES, ids=[f"{t}{d}" for _, t, d in SIGNATURES]
)
def test_documented_signature(page, target, documented):
    doc = ast.parse(f"def f{documented}: pass").body[0].args
    obj = load(target)
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    if isinstance(obj, type):
        obj = obj.__init__
    assert not check_signature(doc, obj, target)


def test_reindent_restores_flattened_blocks():
    # As agentic.md prints a class: every nested line starts with one space.
    flat = (
        "class A:\n def f(self):\n return [\n 1,\n ]\n\n"
        " @staticmethod\n def g():\n for i in (2,):\n x = i\n return x\n"
        "y = A().f() + [A.g()]"
    )
    namespace: dict[str, Any] = {}
    exec(reindent(flat), namespace)  # a fixed snippet
    assert namespace["y"] == [1, 2]


if __name__ == "__main__":
    print(json.dumps(run_page(json.load(sys.stdin))))
