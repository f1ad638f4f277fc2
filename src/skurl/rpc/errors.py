"""Errors of the gRPC layer, on both sides of the wire.

Server side, a handler raises `WireError` (a malformed request: INVALID_ARGUMENT),
skurl.sim.api's `EnvStateError` (a valid call at the wrong time: FAILED_PRECONDITION) or
`CapacityError` (RESOURCE_EXHAUSTED); servicer_base turns them into status codes with
one-line details and the server keeps serving.
Client side, `from_rpc_error` turns a grpc.RpcError into a skurl UserError that names
the server's address, so the CLI prints one line and exits 2 instead of a traceback.
"""

from __future__ import annotations

import grpc

from skurl.errors import UserError


class WireError(UserError):
    """A request or reply does not match the wire contract (names, dtypes, shapes, bytes)."""

    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class CapacityError(UserError):
    """The server holds as many sessions as it may, or a reply would be over the limit."""

    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class NotFoundError(UserError):
    """Nothing held under that name (yet)."""

    grpc_code = grpc.StatusCode.NOT_FOUND


class RpcError(UserError):
    """A call to a skurl server failed; the message names the address and the status."""

    def __init__(self, message: str, address: str, code: grpc.StatusCode | None) -> None:
        super().__init__(message)
        self.address = address
        self.code = code


class ServerUnavailableError(RpcError):
    """The server cannot be reached (not started, killed, wrong address, network down)."""


class RpcTimeoutError(RpcError):
    """The call's deadline (rpc.timeout_s) passed before the server answered."""


class RequestRejectedError(RpcError):
    """The server refused the request (bad arguments, wrong state, too large)."""


# What should be serving each service, for the UNAVAILABLE hint.
SIM_SERVER = "skurl serve-sim"
COLLECTOR = "skurl collector"
class VersionNotNewerError(RequestRejectedError, ValueError):
    """Weights published with a version not above the server's (a ValueError, as in InProcWeights)."""


WEIGHTS = "the learner's weights service (sync.backend=grpc, deploy.weights_address)"
_HINTS = {
    grpc.StatusCode.DEADLINE_EXCEEDED: "raise rpc.timeout_s if the server is just slow",
}
# gRPC core's own words for a message over the size limit (sent or received).
_TOO_LARGE = "message larger than max"


def from_rpc_error(exc: grpc.RpcError, address: str, what: str,
                   rejected: dict[grpc.StatusCode, type[RpcError]] | None = None,
                   server: str = SIM_SERVER) -> RpcError:
    """The skurl error for a failed call `what` (e.g. 'Step') to the server at `address`;
    `rejected` picks more specific classes for some status codes; `server` names what
    should be serving there."""
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
    details = " ".join(details.split())  # one line, whatever the server or core wrote
    name = code.name if code is not None else "UNKNOWN"
    hint = _HINTS.get(code, "") if code is not None else ""
    if code == grpc.StatusCode.UNAVAILABLE:
        hint = f"is {server} running there?"
    if _TOO_LARGE in details.lower():
        hint = "raise rpc.max_message_mb on both sides, or use more shards"
    message = f"{what} on {address} failed ({name}): {details}" + (f"; {hint}" if hint else "")
    if code == grpc.StatusCode.UNAVAILABLE:
        return ServerUnavailableError(message, address, code)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RpcTimeoutError(message, address, code)
    cls = (rejected or {}).get(code, RequestRejectedError) if code else RequestRejectedError
    return cls(message, address, code)
