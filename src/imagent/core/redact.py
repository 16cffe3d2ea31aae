"""Secrets never reach output: one redaction for every error, trace, log and file imagent writes.

Keys live in environment variables named by the configuration (``api_key_env`` of a model entry or a
tool's options). Loading the configuration registers those names (:func:`register_env_names`); each
backend registers the name it reads its key from as well, so a key is known before any request that
could echo it. :func:`redact` then replaces

- the value of every registered variable that is set (read at redaction time, so a key exported after
  the configuration was loaded is still covered), and any value given to :func:`register_secret`;
- credentials in the shapes servers echo back even when the key is not one imagent knows:
  ``Authorization: Bearer ...`` (or ``Basic``/``Token``), a bare ``Bearer ...``, the ``api-key``,
  ``x-api-key`` and ``x-subscription-token`` headers, and ``key=``/``api_key=``/``access_token=``-style URL
  parameters.

A known value is masked whole, and so is any cut-off start of it (at least :data:`MIN_PREFIX_LEN`
characters): text cut at a length limit before it was masked must not leave most of a key behind. The values
of environment variables named ``*_API_KEY`` count as known even when no configuration names them.
:func:`mask_secrets` masks only the known values (not the credential shapes): it is applied to what a model
*answers* (text, tool-call arguments, logprob tokens) before the trace, the call cache, logs, the web API
or its events see it, where the shapes would garble ordinary text.

The replacement is ``***``. Applied where text leaves the process or enters a record: model-call errors
(the chat backends), trace notes and call errors (:mod:`imagent.core.trace`), eval files, CLI error lines
and the web API's error bodies. Redacting an already redacted text changes nothing.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from typing import Any

MASK = "***"
# Shorter values are not treated as secrets: masking "abc" everywhere would garble every message, and
# real API keys are far longer (OpenAI ~50, Google 39, Brave 31 characters).
MIN_SECRET_LEN = 8
# A cut-off start of a known secret this long (or the whole secret, if shorter) is masked as well.
MIN_PREFIX_LEN = 12

_lock = threading.Lock()
_env_names: set[str] = set()
_secrets: set[str] = set()

# Header-like "name: value" / "name=value" pairs whose value is a credential; the value runs to the end of
# the token (quotes, backslashes, commas, braces and whitespace end it), so surrounding text stays readable and
# redacting serialised JSON keeps it valid JSON (an escaped quote keeps its backslash).
_VALUE = r"[^\s\"'\\,;&}\])<>]+"
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization: Bearer abc / "authorization": "Basic abc" / Proxy-Authorization
    (re.compile(r"((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?\s*(?:bearer|basic|token|digest)?\s*)" + _VALUE,
                re.I), r"\1" + MASK),
    # A bare bearer token anywhere (e.g. inside a repr of headers); only a credential-like word (a digit in it,
    # or 20+ characters), so "a standard bearer holding a flag" in a caption stays as it is.
    (re.compile(r"(\bbearer\s+)(?=" + _VALUE[:-1] + r"*\d|" + _VALUE[:-1] + r"{20})" + _VALUE, re.I), r"\1" + MASK),
    # api-key / x-api-key / x-goog-api-key / x-subscription-token / openai-api-key headers
    (re.compile(r"((?:x-[\w-]*)?(?:api[-_]?key|subscription[-_]token)[\"']?\s*:\s*[\"']?)" + _VALUE, re.I),
     r"\1" + MASK),
    # URL or form parameters: ?key=K, &api_key=K, apikey=K, access_token=K, token=K, client_secret=K
    (re.compile(r"((?:^|[?&;\s\"'])(?:key|api[-_]?key|apikey|access[-_]?token|token|client[-_]?secret|secret|"
                r"password)=)" + _VALUE, re.I), r"\1" + MASK),
]


def register_env_names(names: Iterable[str | None]) -> None:
    """Remember environment variable names that hold secrets (``api_key_env`` values)."""
    with _lock:
        _env_names.update(n for n in names if n)


def register_secret(value: str | None) -> None:
    """Remember one secret value (a key given directly rather than through the environment)."""
    if value and len(value.strip()) >= MIN_SECRET_LEN:
        with _lock:
            _secrets.add(value.strip())


def registered_env_names() -> frozenset[str]:
    with _lock:
        return frozenset(_env_names)


def known_secrets() -> list[str]:
    """The secret values redaction masks now, longest first (so a key that contains another is masked whole)."""
    with _lock:
        names = list(_env_names)
        values = set(_secrets)
    names += [n for n in os.environ if n.upper().endswith("_API_KEY")]
    for name in names:
        value = os.environ.get(name, "").strip()
        if len(value) >= MIN_SECRET_LEN:
            values.add(value)
    return sorted(values, key=len, reverse=True)


def _mask_known(s: str) -> str:
    for secret in known_secrets():
        if secret in s:
            s = s.replace(secret, MASK)
        head = secret[:max(MIN_SECRET_LEN, min(MIN_PREFIX_LEN, len(secret)))]
        if head in s:  # a cut-off start of the secret: mask as much of it as is there
            out, i = [], 0
            while (j := s.find(head, i)) >= 0:
                n = len(head)
                while j + n < len(s) and n < len(secret) and s[j + n] == secret[n]:
                    n += 1
                out.append(s[i:j] + MASK)
                i = j + n
            s = "".join(out) + s[i:]
    return s


def mask_secrets(text: Any) -> str:
    """``text`` with every known secret value (and any cut-off start of one) masked; credential shapes are
    left alone (for model answers, where ``key=value`` is ordinary text)."""
    s = text if isinstance(text, str) else str(text)
    return _mask_known(s) if s else s


def redact(text: Any) -> str:
    """``text`` (anything; non-strings are ``str()``-ed) with every known secret and credential masked."""
    s = text if isinstance(text, str) else str(text)
    if not s:
        return s
    s = _mask_known(s)
    for pattern, repl in _PATTERNS:
        s = pattern.sub(repl, s)
    return s


def redact_data(obj: Any) -> Any:
    """``obj`` (JSON-like: dicts, lists, tuples, strings) with every string passed through :func:`redact`."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_data(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_data(v) for v in obj]
    return obj


__all__ = ["MASK", "known_secrets", "mask_secrets", "redact", "redact_data", "register_env_names", "register_secret",
           "registered_env_names"]
