"""Seeded generator of realistic agent conversations, clean or with labelled defects.

The command line of :mod:`twinkle.data_format.synthetic`, also run as
``python -m twinkle.synthetic``. Rows stream to the output as they are made; a progress bar
goes to stderr (``--quiet`` turns it off), so stdout and the output file hold only JSONL.

Example:
    >>> main(["--rows", "3", "--seed", "1", "--quiet", "-o", "rows.jsonl"])
    0
    >>> from pathlib import Path
    >>> len(Path("rows.jsonl").read_text(encoding="utf-8").splitlines())
    3
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import IO, Any

from twinkle.data_format.synthetic.generator import iter_rows, to_jsonl_line
from twinkle.data_format.synthetic.labels import LANGS

#: Rows per progress-bar update: one update per row would cost more than small rows do.
_PROGRESS_CHUNK = 64


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m twinkle.synthetic", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=100, help="rows to write (default: 100)")
    parser.add_argument(
        "--seed", type=int, default=0, help="the same seed gives the same bytes (default: 0)"
    )
    parser.add_argument(
        "-o", "--output", required=True, help="JSONL file to write ('-' for stdout)"
    )
    parser.add_argument("--defects", action="store_true", help="inject labelled defects")
    parser.add_argument(
        "--defect-rate",
        type=float,
        default=0.35,
        help="share of rows given a defect, with --defects (default: 0.35)",
    )
    parser.add_argument(
        "--target-bytes",
        type=int,
        default=0,
        help="grow rows to about this many bytes (default: 0, their natural size)",
    )
    parser.add_argument(
        "--langs", default=",".join(LANGS), help="comma-separated subset of en,zh,ja,ko"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")
    return parser


def _write(rows: Iterable[dict[str, Any]], out: IO[str], total: int, quiet: bool) -> None:
    from tqdm import tqdm  # only the command line draws progress

    with tqdm(total=total, unit="row", desc="synthetic", file=sys.stderr, disable=quiet) as bar:
        pending = 0
        for row in rows:
            out.write(to_jsonl_line(row))
            pending += 1
            if pending == _PROGRESS_CHUNK:
                bar.update(pending)
                pending = 0
        bar.update(pending)


def main(argv: list[str] | None = None) -> int:
    """Generate rows as the arguments say and write them as JSONL; returns the exit code.

    Bad arguments exit with status 2 and a usage message, as argparse does.

    Example:
        >>> main(["--rows", "2", "--quiet", "-o", "-"])  # doctest: +ELLIPSIS
        {"id": "syn-0-000000", ...}
        {"id": "syn-0-000001", ...}
        0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        rows = iter_rows(
            args.rows,
            args.seed,
            args.defects,
            args.defect_rate,
            args.target_bytes,
            tuple(x for x in args.langs.split(",") if x),
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.output == "-":
        _write(rows, sys.stdout, args.rows, args.quiet)
    else:
        with open(args.output, "w", encoding="utf-8") as fh:
            _write(rows, fh, args.rows, args.quiet)
    return 0
