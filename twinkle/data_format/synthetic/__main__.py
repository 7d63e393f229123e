"""``python -m twinkle.data_format.synthetic``: the generator's command line.

Example:
    >>> from twinkle.data_format.synthetic.cli import main
    >>> main(["--rows", "1", "--quiet", "-o", "one.jsonl"])
    0
"""

from twinkle.data_format.synthetic.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
