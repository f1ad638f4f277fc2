"""gRPC channel and server options from one `RpcConfig`, so both ends always agree.

Message-size limits: `rpc.max_message_mb` sets the send and receive limit of clients and
servers alike (gRPC's own default receive limit, 4 MiB, is far below one 100k-SKU step).

More: docs/internals.md (rpc/options.py)."""

from __future__ import annotations

from skurl.config import RpcConfig

Options = list[tuple[str, int]]

# Floor on the ack wait: a loaded server (a 10^6-SKU step holds a core) acks late.
_MIN_KEEPALIVE_TIMEOUT_MS = 10_000


def max_message_bytes(cfg: RpcConfig) -> int:
    return min(cfg.max_message_mb * 1024 * 1024, 2**31 - 1)


def _common(cfg: RpcConfig) -> Options:
    limit = max_message_bytes(cfg)
    opts: Options = [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
    ]
    if cfg.keepalive_s > 0:
        period_ms = int(cfg.keepalive_s * 1000)
        opts += [
            ("grpc.keepalive_time_ms", period_ms),
            ("grpc.keepalive_timeout_ms", max(period_ms, _MIN_KEEPALIVE_TIMEOUT_MS)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    return opts


def channel_options(cfg: RpcConfig) -> Options:
    """Options for grpc.insecure_channel(address, options=...)."""
    return _common(cfg)


def server_options(cfg: RpcConfig) -> Options:
    """Options for grpc.server(..., options=...)."""
    # A server owns its port. gRPC's default SO_REUSEPORT lets a second server bind a live
    # one's port (even by autoselect, port 0: grpc/grpc#10755) and the kernel then splits
    # the clients between the two: a simulator shard answered by another process's state.
    opts = [*_common(cfg), ("grpc.so_reuseport", 0)]
    if cfg.keepalive_s > 0:
        # Accept client pings as often as our own config sends them (half, for jitter).
        opts.append(("grpc.http2.min_ping_interval_without_data_ms",
                     max(1, int(cfg.keepalive_s * 500))))
    if cfg.max_connection_age_s > 0:
        opts += [("grpc.max_connection_age_ms", int(cfg.max_connection_age_s * 1000)),
                 ("grpc.max_connection_age_grace_ms", _grace_ms(cfg))]
    return opts


def _grace_ms(cfg: RpcConfig) -> int:
    """The grace never cuts a call that is still inside its own deadline (rpc.timeout_s)."""
    return int(max(cfg.max_connection_age_grace_s, cfg.timeout_s) * 1000)
