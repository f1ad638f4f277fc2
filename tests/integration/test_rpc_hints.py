"""A client that cannot reach its server names what should be serving there (defect 10 of
issue 42: a collector started before the learner asked whether `skurl serve-sim` ran at the
learner's weights address)."""

from __future__ import annotations

import pytest

from skurl.config import RpcConfig
from skurl.modes.decoupled.collector_client import CollectorClient
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.errors import ServerUnavailableError
from skurl.sync.grpc import GrpcWeightPublisher, GrpcWeightSubscriber

NOBODY = "127.0.0.1:1"  # a port nothing listens on


@pytest.mark.parametrize(("client", "serving"), [
    (lambda: RemoteEnv(NOBODY, RpcConfig(), connect_timeout_s=0.3), "skurl serve-sim"),
    (lambda: CollectorClient(NOBODY, RpcConfig(), connect_timeout_s=0.3), "skurl collector"),
    (lambda: GrpcWeightSubscriber(NOBODY, RpcConfig(), connect_timeout_s=0.3), "weights service"),
    (lambda: GrpcWeightPublisher(NOBODY, RpcConfig(), connect_timeout_s=0.3), "weights service"),
], ids=["env", "collector", "subscriber", "publisher"])
def test_unreachable_server_error_names_what_should_serve(client, serving: str) -> None:
    with pytest.raises(ServerUnavailableError) as info:
        client()
    message = str(info.value)
    assert NOBODY in message and serving in message and "\n" not in message, message
    if serving != "skurl serve-sim":
        assert "serve-sim" not in message
