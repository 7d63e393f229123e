"""Core test fixtures: make the helper environments importable by name (forks pickle them)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
