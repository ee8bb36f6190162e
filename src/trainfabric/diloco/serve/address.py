"""Addresses the serving commands take: a server's base URL, a host and port to listen on.

Each is refused before anything starts, with a :class:`~trainfabric.errors.ConfigError` naming
the field: :data:`BaseUrl` (a config field) is ``http(s)://HOST[:PORT]`` as the HTTP client
parses it (an IPv4 address has octets up to 255, a bracketed IPv6 address is closed, the port
is within 1..65535); :func:`free_port` asks the OS for a free port; :func:`check_host` binds
the host once; :func:`bind_refusal` words a bind that failed; :func:`url_host` writes a host
into a URL.
"""

from __future__ import annotations

import errno
import socket
from typing import Annotated

from pydantic import AfterValidator, Field

from trainfabric.errors import ConfigError
from trainfabric.io import os_reason


def check_base_url(url: str) -> str:
    """``url`` if the HTTP client can send to it (a host, a port within 1..65535), else
    ValueError saying why."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc})") from None
    if not parsed.host:
        raise ValueError(f"{url!r} names no host")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise ValueError(f"{url!r}: port {parsed.port} is not within 1..65535")
    return url


URL_PATTERN = r"^https?://[^\s/]+(:\d+)?$"
BaseUrl = Annotated[str, Field(pattern=URL_PATTERN), AfterValidator(check_base_url)]


def url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` (IPv4 or IPv6) a moment ago (the OS's choice for
    port 0)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as s:
        s.bind(addr)
        return s.getsockname()[1]


def check_host(host: str) -> None:
    """Refuse a ``host`` this machine cannot listen on: not a name or address, or not one of
    its own (ConfigError naming ``host``)."""
    try:
        free_port(host)
    except (OSError, UnicodeError) as exc:
        raise bind_refusal(host, 0, exc) from None


def bind_refusal(host: str, port: int, exc: OSError | UnicodeError) -> ConfigError:
    """The ConfigError for listening on ``host:port`` failing with ``exc``: naming ``port``
    when it is taken or reserved, else ``host``."""
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EACCES):
        return ConfigError("port", f"cannot listen on port {port}: {os_reason(exc)}")
    return ConfigError("host", f"cannot listen on {host!r}: {_reason(exc)}")


def _reason(exc: OSError | UnicodeError) -> str:
    """A resolver error's own text (its errno is not the system's), an OSError's
    :func:`~trainfabric.io.os_reason`, else the exception's text (an IDNA label too long)."""
    if isinstance(exc, socket.gaierror):
        return str(exc.strerror)
    return os_reason(exc) if isinstance(exc, OSError) else str(exc)
