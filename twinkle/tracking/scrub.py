"""Secret scrubbing applied to everything twinkle sends to MLflow.

Run parameters, tags, span inputs and outputs all pass through ``scrub_secrets`` first, so
an API key given on the command line, an ``Authorization`` header captured in a request, or
a token pasted into a conversation never lands in the tracking store. Two rules apply:

* a mapping key that names a secret (``*key*``, ``*token*``, ``*secret*``, ``*password*``,
  ``authorization``, ``cookie``, ``credential``) has its value replaced, whatever it is;
* inside any string, values that look like credentials (``sk-...`` keys, ``Bearer ...``
  headers, ``e2b_...`` keys, ``key=value`` pairs whose key names a secret, the password or
  token in a URL's ``user:password@``) are replaced.

A name ending in ``_env`` (``api_key_env``) holds the *name* of an environment variable, not
its value: kept when it looks like one (``E2B_API_KEY``), redacted otherwise. ``redact`` is
the one entry point; ``scrub_secrets`` is the same function under its older name.

Pure standard library (``re``): it runs on every payload, so it must stay cheap and must
not import MLflow.

Example:
    >>> scrub_secrets({'api_key': 'sk-abc', 'note': 'Authorization: Bearer abc.def'})
    {'api_key': '[REDACTED]', 'note': 'Authorization: Bearer [REDACTED]'}
    >>> redact({'base_url': 'http://me:hunter22@host:8000/v1', 'api_key_env': 'E2B_API_KEY'})
    {'base_url': 'http://me:[REDACTED]@host:8000/v1', 'api_key_env': 'E2B_API_KEY'}
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
    # scheme://user:password@host (and scheme://token@host): the password or token goes
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/@:]+):([^\s/@]+)@"), r"\1\2:" + REDACTED + "@"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/@:]{8,})@"), r"\1" + REDACTED + "@"),
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
_TRIGGER_RE = re.compile(r"(?i)bearer|[srp]k[-_]|e2b|api[_-]?key|token|secret|passw|://[^\s/]*@")
#: What an ``*_env`` setting should hold: an environment variable's name.
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


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


def redact(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` (dicts, lists, strings, scalars) with secrets redacted: what
    twinkle logs to MLflow (params, tags, JSON artifacts, trace payloads) goes through it."""
    if _depth > 64:  # pathological nesting: refuse to walk it rather than recurse forever
        return REDACTED
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and is_secret_name(k) and not _is_count(k, v):
                out[k] = v if v in (None, "") or _is_env_name(k, v) else REDACTED
            else:
                out[k] = redact(v, _depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, _depth + 1) for v in value)
    return value


scrub_secrets = redact


def _is_env_name(name: str, value: Any) -> bool:
    # "api_key_env": "E2B_API_KEY" names the variable that holds the key, not the key.
    return (
        name.lower().endswith("_env")
        and isinstance(value, str)
        and bool(_ENV_NAME_RE.fullmatch(value))
    )


def _is_count(name: str, value: Any) -> bool:
    # "max_tokens": 512 or "prompt_tokens": 30 are usage figures, keep them visible.
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and "token" in name.lower()
    )
