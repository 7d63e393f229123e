"""Checks before a run starts work: inputs, endpoints and tracking URIs, one line per problem.

A pipeline run that would fail on a missing input or a dead endpoint should fail in seconds,
before curation or a single model call, and say what to fix. The static checks (files,
URL syntax, credentials written into a URL, the tracking store's directory) need no
network; ``probe`` asks an HTTP endpoint once, with a short timeout. Standard library plus
``httpx`` (a dependency), so the CLI can run the static checks before it imports Prefect.

Example:
    >>> check_inputs(['/nonexistent/rows.jsonl'])
    ['input /nonexistent/rows.jsonl does not exist: give an existing JSONL or Parquet file']
    >>> check_url('localhost:8000', 'policy base URL')
    "policy base URL 'localhost:8000' is not an http(s) URL: write it as http://host:port/..."
    >>> split_credentials('http://me:hunter22@host:8000/v1')
    ('http://host:8000/v1', 'me', 'hunter22')
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from twinkle.errors import TwinkleError
from twinkle.rollout.base import endpoint_label

__all__ = [
    "CREDENTIALS_IN_URL",
    "PreflightError",
    "check_credentials",
    "check_inputs",
    "check_tracking_uri",
    "check_url",
    "has_embedded_credentials",
    "probe",
    "split_credentials",
]

#: ``scheme://<user info>@``: a URL that carries a user name, token or password. One pattern
#: for the parameter models' check and their JSON schema (Python and ECMAScript read it
#: alike), so the Prefect server refuses such a flow run before storing its parameters.
CREDENTIALS_IN_URL = r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@"
_CREDENTIALS_RE = re.compile(CREDENTIALS_IN_URL)
# The same inside a longer text (a task's ``?sandbox_url=...``, a constructor argument).
_EMBEDDED_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s\"'&]*@")


def has_embedded_credentials(text: str) -> bool:
    """Whether ``text`` holds a URL with credentials anywhere in it.

    Example:
        >>> has_embedded_credentials('code?sandbox_url=http://u:pw@h:1')
        True
        >>> has_embedded_credentials('write to a@b.org')
        False
    """
    return bool(_EMBEDDED_RE.search(text))


class PreflightError(TwinkleError, ValueError):
    """Something a run needs is unusable; the message says what to fix, one line each.

    Example:
        >>> str(PreflightError(['input x.jsonl does not exist']))
        'input x.jsonl does not exist'
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def check_inputs(paths: Iterable[str]) -> list[str]:
    """Problems with input files (missing, a directory without data files, unreadable,
    empty)."""
    problems = []
    from twinkle.io_formats import expand_sources, is_dataset_folder

    for path in paths:
        p = Path(path)
        if not p.exists() and set("*?[") & set(str(path)):
            try:
                expand_sources([path])
            except (FileNotFoundError, ValueError) as exc:
                problems.append(f"input {exc}")
        elif not p.exists():
            problems.append(f"input {path} does not exist: give an existing JSONL or Parquet file")
        elif is_dataset_folder(p):
            continue
        elif p.is_dir():
            if not any(
                f.suffix in (".jsonl", ".json", ".parquet") for f in p.iterdir() if f.is_file()
            ):
                problems.append(f"input {path} is a folder without .jsonl/.json/.parquet files")
        elif not os.access(p, os.R_OK):
            problems.append(f"input {path} is not readable: check its permissions")
        elif p.stat().st_size == 0:
            problems.append(f"input {path} is empty: give a file with rows")
    return problems


def check_url(url: str | None, what: str) -> str | None:
    """A problem with an endpoint URL's form (scheme and host), or None."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        return f"{what} {endpoint_label(url)!r} is malformed ({exc}): fix the URL"
    if parts.scheme not in ("http", "https") or not host:
        return (
            f"{what} {endpoint_label(url)!r} is not an http(s) URL: "
            "write it as http://host:port/..."
        )
    return None


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and the user name and password it held
    (None each when absent; a URL without credentials comes back unchanged)."""
    if not _CREDENTIALS_RE.match(url):
        return url, None, None
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[1]
    user, password = parts.username, parts.password
    return (
        urlunsplit(parts._replace(netloc=host)),
        unquote(user) if user else None,
        None if password is None else unquote(password),
    )


def check_credentials(url: str | None, what: str, fix: str) -> str | None:
    """A problem when ``url`` carries credentials (``user:password@``, ``token@``), which
    Prefect would store with the flow run's parameters and MLflow with the run's; ``fix``
    says where the secret goes instead. The message masks them.

    Example:
        >>> check_credentials('http://u:pw@h/v1', '--base-url', 'use --api-key-env')[:45]
        "--base-url 'http://***@h/v1' carries credenti"
    """
    if not url or not _CREDENTIALS_RE.match(url):
        return None
    parts = urlsplit(url)
    masked = urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
    return (
        f"{what} {masked!r} carries credentials, which Prefect and MLflow would store with "
        f"the run: remove them from the URL and {fix}"
    )


def check_tracking_uri(uri: str | None) -> str | None:
    """A problem with an MLflow tracking URI that can be seen without MLflow, or None:
    a SQLite store whose folder cannot be created or written, an http(s) server that does
    not answer, a scheme MLflow does not know."""
    if not uri:
        return None
    if uri.startswith("sqlite:"):
        if not uri.startswith("sqlite:///"):
            return f"tracking URI {uri!r} is not sqlite:///<path>: e.g. sqlite:////abs/mlflow.db"
        db = Path(uri[len("sqlite:///") :])
        folder = db.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if db.is_dir():
            return f"tracking URI {uri}: {db} is a folder, not a database file"
        if not folder.is_dir():  # a file where a folder of the path should be
            return f"tracking URI {uri}: {folder} is a file, not a folder: pick another path"
        if not os.access(folder, os.W_OK):
            return f"tracking URI {uri}: {folder} is not writable: pick another path"
        return None
    if uri.startswith(("http://", "https://")):
        bad = check_url(uri, "tracking URI")
        if bad:
            return bad
        problem = probe(uri.rstrip("/") + "/health", "MLflow tracking server", ok_4xx=True)
        if problem:
            return f"{problem}: start it (infra/mlflow/) or give another --tracking-uri"
        return None
    scheme = uri.split(":", 1)[0] if ":" in uri else ""
    known = ("file", "databricks", "postgresql", "mysql", "mssql", "uc", "databricks-uc")
    if scheme and scheme.split("+")[0] not in known and len(scheme) > 1:
        return f"tracking URI {uri!r} has an unknown scheme {scheme!r}: use sqlite:/// or http://"
    return None


def probe(
    url: str,
    what: str,
    *,
    api_key: str | None = None,
    timeout: float = 5.0,
    ok_4xx: bool = True,
    check_key: bool = True,
) -> str | None:
    """Ask ``url`` once (GET); None when it answers, else ``'<what> <url>: <status>'``.

    Any HTTP answer means someone is listening, except 401/403 with ``check_key`` (the key
    is missing or wrong: every call would fail) and 5xx; a 404 passes (not every server has
    the probed path); with ``ok_4xx=False`` every 4xx fails.
    """
    import httpx

    label = endpoint_label(url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout, follow_redirects=True)
    except httpx.TimeoutException:
        return f"{what} {label}: no reply within {timeout:g} s"
    except httpx.HTTPError as exc:
        return f"{what} {label}: unreachable ({type(exc).__name__}: {exc})"
    status = response.status_code
    if status in (401, 403) and check_key:
        why = "the API key is refused" if api_key else "it wants an API key"
        return f"{what} {label}: HTTP {status}, {why}: check the key's environment variable"
    if status >= 500 or (status >= 400 and not ok_4xx):
        return f"{what} {label}: HTTP {status}"
    return None
