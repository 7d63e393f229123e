"""Secret scrubbing applied to everything twinkle sends to MLflow.

Run parameters, tags, span inputs and outputs all pass through ``scrub_secrets`` first, so
an API key given on the command line, an ``Authorization`` header captured in a request, or
a token pasted into a conversation never lands in the tracking store. Two rules apply:

* a mapping key that names a secret (``*key*``, ``*token*``, ``*secret*``, ``*password*``,
  ``authorization``, ``cookie``, ``credential``) has its value replaced, whatever it is;
* inside any string, values that look like credentials (``sk-...`` keys, ``Bearer ...``
  headers, ``e2b_...`` keys, ``key=value`` pairs whose key names a secret) are replaced.

Pure standard library (``re``): it runs on every payload, so it must stay cheap and must
not import MLflow.

Example:
    >>> scrub_secrets({'api_key': 'sk-abc', 'note': 'Authorization: Bearer abc.def'})
    {'api_key': '[REDACTED]', 'note': 'Authorization: Bearer [REDACTED]'}
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[REDACTED]"

# Names whose values are secrets. Token *counts* (prompt_tokens, max_tokens, num_tokens) are
# numbers about usage, not credentials, so integers under such names are kept.
SECRET_NAME_RE = re.compile(
    r"(key|token|secret|passw(or)?d|authori[sz]ation|cookie|credential|bearer)", re.IGNORECASE
)
_SECRET_VALUE_RES = (
    # "Authorization: Bearer xyz" / "bearer xyz"
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{4,}"), r"\1" + REDACTED),
    # OpenAI/Anthropic/E2B-style keys anywhere in text
    (re.compile(r"\b(sk|rk|pk|sk-ant|e2b)[-_][A-Za-z0-9_-]{6,}"), REDACTED),
    # key=value / "key": "value" / KEY: value where the key names a secret
    (
        re.compile(
            r"(?i)\b([A-Za-z0-9_.-]*(?:api[_-]?key|token|secret|passw(?:or)?d)[A-Za-z0-9_.-]*)"
            r"(\"?\s*[:=]\s*\"?)(?!\[REDACTED\])([^\s\"',;&]{3,})"
        ),
        r"\1\2" + REDACTED,
    ),
)


# Every pattern above needs one of these words; one scan for them spares most strings the
# three substitutions (trace payloads are mostly prose and command output without secrets).
_TRIGGER_RE = re.compile(r"(?i)bearer|[srp]k[-_]|e2b|api[_-]?key|token|secret|passw")


def is_secret_name(name: str) -> bool:
    """True when a parameter, header or field called ``name`` holds a secret."""
    return bool(SECRET_NAME_RE.search(name))


def scrub_text(text: str) -> str:
    """``text`` with credential-looking substrings replaced by ``[REDACTED]``."""
    if not _TRIGGER_RE.search(text):
        return text
    for pattern, repl in _SECRET_VALUE_RES:
        text = pattern.sub(repl, text)
    return text


def scrub_secrets(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` (dicts, lists, strings, scalars) with secrets redacted."""
    if _depth > 64:  # pathological nesting: refuse to walk it rather than recurse forever
        return REDACTED
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and is_secret_name(k) and not _is_count(k, v):
                out[k] = REDACTED if v not in (None, "") else v
            else:
                out[k] = scrub_secrets(v, _depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_secrets(v, _depth + 1) for v in value)
    return value


def _is_count(name: str, value: Any) -> bool:
    # "max_tokens": 512 or "prompt_tokens": 30 are usage figures, keep them visible.
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and "token" in name.lower()
    )
