"""Seeded generator of realistic agent conversations, clean or with labelled defects.

Standard library only (``random.Random`` with an explicit seed, ``hashlib``, ``json``): the
same ``--seed`` always gives byte-identical output, so examples, tests and benchmarks can
be regenerated anywhere. The phrases come from the JSON banks in ``data/``
(:mod:`~twinkle.data_format.synthetic.banks`).

Rows are OpenAI-style conversations in English, Chinese, Japanese and Korean: a system
prompt, user requests, assistant turns with ``<think>`` blocks or ``reasoning_content``,
tool calls to the sandbox tools ``run_command`` ({"command"}), ``write_file`` ({"path",
"content"}) and ``read_file`` ({"path"}), and tool results that a Linux sandbox with
``python3`` reproduces exactly (files live under ``/home/user``; command output follows
``twinkle.envs.base.format_command_output``; ``write_file`` answers ``File written: <path>``).
About a fifth of the rows are plain question/answer conversations without tools.

Labels. Every row carries ``user_data`` entries (``(key, json)`` pairs, read them with
``twinkle.data_format.user_data_get`` or :func:`label_of`):

- ``synthetic_defect``: ``"none"`` for a clean row, else one of :data:`DEFECTS`;
- ``synthetic_variant``: how the defect was made (e.g. ``"think_repetition"``);
- ``synthetic_lang``: ``en``/``zh``/``ja``/``ko``; ``synthetic_agent``: whether the row
  calls tools; ``synthetic_dup_of``: the id a duplicate copies.

Defects (``--defects``): exact and near duplicates of earlier clean rows, dead loops
(visible hesitation loops, repetitive or hesitating reasoning, in two turns of an agent
row, or the same tool call with the same output over and over), refusals (first reply,
or after a tool call), token soup (mixed-script garble, a garbled tail, replacement
characters, leaked special tokens, one character repeated), trivial greetings and rounds
over 50,000 characters. ``DEFECT_TARGETS`` names the filter meant to catch each.

Modules: ``labels`` (languages, defects, :func:`label_of`), ``banks`` (the phrase data),
``conversation`` (clean rows), ``defects`` (defective rows), ``generator``
(:func:`generate`, :func:`iter_rows`, :func:`write_jsonl`) and ``cli``.

Usage::

    python -m twinkle.synthetic --rows 1000 --seed 7 -o rows.jsonl --defects --target-bytes 4096
    # examples/conversations.jsonl:
    python -m twinkle.synthetic --rows 40 --seed 2026 --defects --defect-rate 0.2 \\
        -o examples/conversations.jsonl

Example:
    >>> rows = generate(3, seed=1)
    >>> [label_of(r)['defect'] for r in rows]
    ['none', 'none', 'none']
    >>> generate(3, seed=1) == rows
    True
"""

from twinkle.data_format.synthetic.cli import main
from twinkle.data_format.synthetic.conversation import HOME, MODELS, TOOLS
from twinkle.data_format.synthetic.generator import (
    generate,
    iter_rows,
    to_jsonl_line,
    write_jsonl,
)
from twinkle.data_format.synthetic.labels import DEFECT_TARGETS, DEFECTS, LANGS, label_of

__all__ = [
    "DEFECTS",
    "DEFECT_TARGETS",
    "HOME",
    "LANGS",
    "MODELS",
    "TOOLS",
    "generate",
    "iter_rows",
    "label_of",
    "main",
    "to_jsonl_line",
    "write_jsonl",
]
