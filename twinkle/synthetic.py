"""``python -m twinkle.synthetic``: the seeded conversation generator, under its short name.

The generator lives in :mod:`twinkle.data_format.synthetic`; this module re-exports its
public names so ``from twinkle.synthetic import generate`` and the documented command line
keep working.

Example:
    >>> from twinkle.synthetic import generate, label_of
    >>> label_of(generate(1, seed=1)[0])["defect"]
    'none'
"""

from twinkle.data_format.synthetic import *  # noqa: F403 - the same public names
from twinkle.data_format.synthetic import __all__, main  # noqa: F401 - re-exported

if __name__ == "__main__":
    raise SystemExit(main())
