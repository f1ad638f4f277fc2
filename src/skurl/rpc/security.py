"""Who may talk to a skurl server: mutual TLS and an optional bearer token (docs/security.md).

With rpc.tls.cert/key/ca set, every server listens with `grpc.ssl_server_credentials`
requiring a client certificate signed by rpc.tls.ca, and every client presents its own
(`grpc.ssl_channel_credentials`). With rpc.token_file set, clients send
`authorization: Bearer <token>` on every call and a server interceptor refuses calls
without it (UNAUTHENTICATED); grpc.health.v1 stays open so probes need no secret. A
server on a non-loopback address without TLS logs a warning, or refuses to start when
rpc.require_tls is true. Secrets are read from files and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from skurl.config import RpcConfig
from skurl.errors import ConfigError
from skurl.rpc.options import channel_options

log = logging.getLogger("skurl.rpc.security")
AUTH_HEADER = "authorization"
_OPEN = "/grpc.health.v1.Health/"  # methods served without a token


def _read(path: str, key: str) -> bytes:
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key} = {path!r}: cannot read it ({exc.strerror})") from None
    if not data.strip():
        raise ConfigError(f"{key} = {path!r}: the file is empty")
    return data


def tls_on(cfg: RpcConfig) -> bool:
    return bool(cfg.tls.cert)


def read_token(cfg: RpcConfig) -> str | None:
    """The bearer token of rpc.token_file (first line, stripped), None without one."""
    if not cfg.token_file:
        return None
    token = _read(cfg.token_file, "rpc.token_file").decode("utf-8", "replace").splitlines()[0].strip()
    if not token:
        raise ConfigError(f"rpc.token_file = {cfg.token_file!r}: the first line is empty")
    return token


def server_credentials(cfg: RpcConfig) -> grpc.ServerCredentials | None:
    """TLS credentials that require a client certificate from rpc.tls.ca; None without TLS."""
    if not tls_on(cfg):
        return None
    t = cfg.tls
    return grpc.ssl_server_credentials(
        [(_read(t.key, "rpc.tls.key"), _read(t.cert, "rpc.tls.cert"))],
        root_certificates=_read(t.ca, "rpc.tls.ca"), require_client_auth=True)


def channel_credentials(cfg: RpcConfig) -> grpc.ChannelCredentials | None:
    if not tls_on(cfg):
        return None
    t = cfg.tls
    return grpc.ssl_channel_credentials(
        root_certificates=_read(t.ca, "rpc.tls.ca"), private_key=_read(t.key, "rpc.tls.key"),
        certificate_chain=_read(t.cert, "rpc.tls.cert"))


def open_channel(address: str, cfg: RpcConfig) -> grpc.Channel:
    """A channel to `address` with rpc.tls and rpc.token_file applied (insecure without)."""
    options = channel_options(cfg)
    if cfg.tls.server_name:  # the name the servers' certificates carry, e.g. behind a proxy
        options = [*options, ("grpc.ssl_target_name_override", cfg.tls.server_name)]  # type: ignore[list-item]
    creds = channel_credentials(cfg)
    channel = (grpc.secure_channel(address, creds, options=options) if creds is not None
               else grpc.insecure_channel(address, options=options))
    token = read_token(cfg)
    if token is not None:
        channel = grpc.intercept_channel(channel, _TokenSender(token))
    return channel


class _ClientCallDetails(grpc.ClientCallDetails):
    def __init__(self, details: grpc.ClientCallDetails, metadata: list[tuple[str, str]]) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = getattr(details, "wait_for_ready", None)
        self.compression = getattr(details, "compression", None)


class _TokenSender(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call."""

    def __init__(self, token: str) -> None:
        self._header = (AUTH_HEADER, f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _ClientCallDetails(details, [*(details.metadata or ()), self._header])

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails,
                              request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails,
                               request: Any) -> Any:
        return continuation(self._details(details), request)


class TokenChecker(grpc.ServerInterceptor):
    """Refuses (UNAUTHENTICATED) calls without the bearer token; health stays open."""

    def __init__(self, token: str) -> None:
        self._want = f"Bearer {token}".encode()

    def intercept_service(self, continuation: Callable[..., Any],
                          details: grpc.HandlerCallDetails) -> Any:
        if details.method.startswith(_OPEN):
            return continuation(details)
        got = dict(details.invocation_metadata or ()).get(AUTH_HEADER, "")
        got_bytes = got.encode() if isinstance(got, str) else bytes(got)
        if hmac.compare_digest(got_bytes, self._want):
            return continuation(details)
        handler = continuation(details)
        return _refusal(handler)


def _refusal(handler: Any) -> Any:
    def deny(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (rpc.token_file)")

    if handler is not None and handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)


def server_interceptors(cfg: RpcConfig) -> list[grpc.ServerInterceptor]:
    token = read_token(cfg)
    return [] if token is None else [TokenChecker(token)]


def is_loopback(host: str) -> bool:
    if host in ("localhost", "") or host.startswith("localhost."):
        return host != ""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(host: str, cfg: RpcConfig) -> None:
    """Without TLS a non-loopback address is a warning, or an error with rpc.require_tls."""
    if tls_on(cfg) or is_loopback(host):
        return
    if cfg.require_tls:
        raise ConfigError(f"rpc.require_tls = true: refusing to listen on {host} without TLS; "
                          "set rpc.tls.cert, rpc.tls.key and rpc.tls.ca (scripts/dev_certs.sh)")
    log.warning("listening on %s without TLS: anyone who reaches this port may call it; set "
                "rpc.tls.cert/key/ca (docs/security.md)", host)
