"""What both ends of the wire agree on: the handshake, auth metadata, limits and timeouts."""
from __future__ import annotations

import os

import orjson

PROTOCOL = "stateset-plugin"
TOKEN_ENV = "STATESET_PLUGIN_TOKEN"
PARENT_PID_ENV = "STATESET_PLUGIN_PARENT_PID"
HEALTH_SERVICE = "plugin"
#: Optional fast paths a server lists in Metadata.features, by component kind: a client uses one only when listed.
CONVERSATIONS_JSONL = "reward.conversations_jsonl"
SCREENED_LINES = "reward.screened_lines"
#: The provider RPCs Stop and Logs (additive in v1): a server of an earlier revision lacks them, so the client asks
#: only a server that lists them, and otherwise answers as a provider without them does (NotImplementedError).
PROVIDER_STOP = "provider.stop"
PROVIDER_LOGS = "provider.logs"
FEATURES = {"reward": (CONVERSATIONS_JSONL, SCREENED_LINES), "provider": (PROVIDER_STOP, PROVIDER_LOGS)}
AUTH_HEADER = "authorization"

#: Set explicitly on both ends: large batches of conversations must fit, unbounded ones must not.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


def _seconds(env: str, default: float) -> float:
    try:
        return float(os.environ.get(env, default))
    except ValueError:
        return default


#: Seconds between heartbeats on long streams, and how long a client waits for any event before giving up.
HEARTBEAT_SECONDS = _seconds("STATESET_PLUGIN_HEARTBEAT_S", 5.0)
IDLE_TIMEOUT_SECONDS = _seconds("STATESET_PLUGIN_IDLE_TIMEOUT_S", 60.0)
#: How long a stream may carry only heartbeats: the server is up but the component's work yields nothing (hung).
PROGRESS_TIMEOUT_SECONDS = _seconds("STATESET_PLUGIN_PROGRESS_TIMEOUT_S", 3600.0)
#: Deadline for unary calls (a batch of grades, a quote) and for the handshake line.
UNARY_DEADLINE_SECONDS = _seconds("STATESET_PLUGIN_DEADLINE_S", 300.0)
HANDSHAKE_TIMEOUT_SECONDS = _seconds("STATESET_PLUGIN_HANDSHAKE_TIMEOUT_S", 30.0)


def screened_row_head(conversation_id: str) -> bytes:
    """How an encoded grade row starts (its first two keys), up to its turn's digits. A screened line's rows are
    this head, the turn and a comma, then a tail the server encoded (GradeReply.row_tails)."""
    return b'{"conversation_id":%b,"turn_index":' % orjson.dumps(conversation_id)


#: The head of a row with an empty id and turn 0: what a row tail is cut from, and checked against.
ROW_HEAD = screened_row_head("") + b"0,"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return ((AUTH_HEADER, f"Bearer {token}"),)
