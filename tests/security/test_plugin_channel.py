"""The plugin channel (core/runtimes): a subprocess plugin listens on a unix socket in a 0700 directory, refuses
every call without the launch token or with a wrong one (real gRPC calls), and compares the token in constant
time."""
from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import grpc
import pytest

from stateset_agents.core.contracts import plugin_pb2, plugin_pb2_grpc
from stateset_agents.core.runtimes import load_component, server, wire


@pytest.fixture(scope="module")
def served():
    with load_component("reward:gsm8k", runtime="subprocess") as reward:
        yield reward.conn


def _metadata(address: str, metadata):
    with grpc.insecure_channel(address) as channel:
        return plugin_pb2_grpc.PluginStub(channel).GetMetadata(plugin_pb2.GetMetadataRequest(), metadata=metadata,
                                                               timeout=10)


def test_the_socket_lives_in_a_0700_directory_and_is_0600(served):
    assert served.address.startswith("unix://")
    sock = served.address[len("unix://"):]
    assert stat.S_ISSOCK(os.stat(sock).st_mode)
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    directory = os.stat(os.path.dirname(sock))
    assert stat.S_IMODE(directory.st_mode) == 0o700 and directory.st_uid == os.getuid()


@pytest.mark.parametrize("metadata", [(), wire.bearer("not-the-token"), (("authorization", "Bearer "),),
                                      (("authorization", "the-token-without-bearer"),)],
                         ids=["none", "wrong", "empty", "not-bearer"])
def test_a_call_without_the_token_or_with_a_wrong_one_is_refused(served, metadata):
    if metadata and metadata[0][1] == "the-token-without-bearer":
        metadata = (("authorization", served.token),)
    with pytest.raises(grpc.RpcError) as refused:
        _metadata(served.address, metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # the same call with the launch token answers (so the refusal above is the token's)
    assert _metadata(served.address, wire.bearer(served.token)).name == "gsm8k"


def test_the_token_is_compared_with_hmac_compare_digest(monkeypatch):
    seen = []

    def spy(a, b):
        seen.append((a, b))
        return a == b

    monkeypatch.setattr(server.hmac, "compare_digest", spy)
    auth = server._AuthInterceptor("sekrit")
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: "answered")

    def call(metadata):
        details = SimpleNamespace(method="/stateset.plugin.v1.Plugin/GetMetadata", invocation_metadata=metadata)
        return auth.intercept_service(lambda _: handler, details)

    assert call(wire.bearer("sekrit")) is handler
    assert call(wire.bearer("wrong")) is not handler
    assert seen == [(b"Bearer sekrit", b"Bearer sekrit"), (b"Bearer wrong", b"Bearer sekrit")]
