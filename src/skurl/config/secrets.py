"""Secrets kept out of logs and messages: URLs with their password masked (docs/security.md).

Imports nothing of skurl, so every part (sync, store, deploy) may use it.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

MASK = "***"


def redact_url(url: str) -> str:
    """`url` with any password replaced by ***: redis://u:pw@h:6379/0 -> redis://u:***@h:6379/0."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def with_password(url: str, password: str) -> str:
    """`url` carrying `password` (URL-quoted; any user in `url` kept)."""
    parts = urlsplit(url)
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))
