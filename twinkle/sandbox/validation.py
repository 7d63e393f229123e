"""The ranges of the numbers and sizes a request may carry; anything outside answers 400.

A value outside its range is refused, never clamped, so a client learns of its mistake
(a timeout of ``1e20`` once made every later ``GET /sandboxes`` fail).

=============================================  ============================================
Request value                                  Accepted
=============================================  ============================================
sandbox ``timeout`` (create, connect),         a number of seconds in [0, 86400] (24 h);
``timeout`` / ``duration`` (set timeout)       absent, null or 0: the default, 300
control-plane request body                     at most 1 MiB
envd call body (process and filesystem RPCs)   at most 16 MiB
file upload (``POST /files``)                  at most 512 MiB, after gzip decompression
``ListDir`` ``depth``                          an integer in [0, 100]; 0 or absent: 1
process ``pid`` (selecting a command)          an integer in [1, 4194304]
``Connect-Timeout-Ms`` header                  an integer of at most 10 digits (Connect's
                                               rule); the command is killed when it passes
``Keepalive-Ping-Interval`` header             a number of seconds in [1, 3600]; absent: 30
=============================================  ============================================
"""

from __future__ import annotations

import math
from typing import Any

from twinkle.errors import SandboxError

MAX_TIMEOUT_S = 86_400
DEFAULT_TIMEOUT_S = 300
MAX_CONTROL_BODY = 1 << 20
MAX_RPC_BODY = 16 << 20
MAX_UPLOAD = 512 << 20
MAX_LIST_DEPTH = 100
MAX_PID = 4_194_304
MAX_CONNECT_TIMEOUT_DIGITS = 10
KEEPALIVE_RANGE_S = (1.0, 3600.0)
DEFAULT_KEEPALIVE_S = 30.0


class InvalidRequest(SandboxError, ValueError):
    """A request value outside its documented range (answered with HTTP 400)."""


def timeout_seconds(value: Any, name: str = "timeout") -> float:
    """A sandbox lifetime in seconds: [0, MAX_TIMEOUT_S]; absent, null or 0 is the default."""
    if value is None:
        return DEFAULT_TIMEOUT_S
    seconds = number(value, name, 0, MAX_TIMEOUT_S)
    return seconds or DEFAULT_TIMEOUT_S


def number(value: Any, name: str, low: float, high: float) -> float:
    """A finite JSON number in [low, high]; InvalidRequest otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{name} must be a number, got {value!r:.100}")
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidRequest(f"{name} must be between {low:g} and {high:g}, got {value!r:.100}")
    return float(value)


def integer(value: Any, name: str, low: int, high: int) -> int:
    """An integer (a JSON number without a fraction, or a decimal string) in [low, high]."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) <= 20:
        value = int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an integer, got {value!r:.100}")
    if not low <= value <= high:
        raise InvalidRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


def connect_timeout_s(header: str | None) -> float | None:
    """The ``Connect-Timeout-Ms`` header in seconds (None when absent)."""
    if header is None:
        return None
    if not header.isdigit() or len(header) > MAX_CONNECT_TIMEOUT_DIGITS:
        raise InvalidRequest(
            f"connect-timeout-ms must be at most {MAX_CONNECT_TIMEOUT_DIGITS} digits, "
            f"got {header!r:.40}"
        )
    return int(header) / 1000


def keepalive_s(header: str | None) -> float:
    """The ``Keepalive-Ping-Interval`` header in seconds (30 when absent)."""
    if header is None or header == "":
        return DEFAULT_KEEPALIVE_S
    try:
        value = float(header)
    except ValueError:
        raise InvalidRequest(
            f"keepalive-ping-interval must be a number, got {header!r:.40}"
        ) from None
    return number(value, "keepalive-ping-interval", *KEEPALIVE_RANGE_S)
