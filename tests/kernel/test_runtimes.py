"""The subprocess runtime as the pipeline sees it: the same interface as in-process, and every fault fails closed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import grpc
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stateset_agents import GradeItem
from stateset_agents.core.contracts import plugin_pb2, plugin_pb2_grpc
from stateset_agents.core.errors import ContractMismatch, PluginError
from stateset_agents.core.registry import get_registry
from stateset_agents.core.runtimes import load_component
from stateset_agents.core.runtimes.launcher import launch_subprocess, parse_handshake


def conv(text: str, cid: str = "c1") -> dict:
    return {"id": cid, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": text}]}


@pytest.fixture(scope="module")
def faulty():
    with load_component("reward:test_faulty", runtime="subprocess") as r:
        yield r


def test_handshake_is_exactly_one_json_line_and_the_socket_is_private():
    env = {**os.environ, "STATESET_PLUGIN_TOKEN": "secret-token"}
    proc = subprocess.Popen([sys.executable, "-m", "stateset_agents", "plugin", "serve", "reward:test_length"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        hs = json.loads(proc.stdout.readline())
        assert set(hs) == {"protocol", "contract_versions", "transport", "address", "pid"}
        assert hs["protocol"] == "stateset-plugin" and hs["transport"] == "grpc"
        assert hs["contract_versions"] == [1] and hs["pid"] == proc.pid
        assert hs["address"].startswith("unix:///")
        sock = hs["address"][len("unix://"):]
        assert oct(os.stat(sock).st_mode & 0o777) == "0o600"

        channel = grpc.insecure_channel(hs["address"])
        # Health answers without a token ...
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="plugin"),
                                                           timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        # ... everything else needs it.
        stub = plugin_pb2_grpc.PluginStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.GetMetadata(plugin_pb2.GetMetadataRequest(), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as err:
            stub.GetMetadata(plugin_pb2.GetMetadataRequest(), timeout=10,
                             metadata=(("authorization", "Bearer wrong"),))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        meta = stub.GetMetadata(plugin_pb2.GetMetadataRequest(), timeout=10,
                                metadata=(("authorization", "Bearer secret-token"),))
        assert (meta.kind, meta.name, list(meta.contract_versions)) == ("reward", "test_length", [1])
        stub.Shutdown(plugin_pb2.ShutdownRequest(), timeout=10, metadata=(("authorization", "Bearer secret-token"),))
        assert proc.wait(timeout=15) == 0
        assert not os.path.exists(sock)
    finally:
        proc.kill()


def test_same_results_in_process_and_out_of_process():
    convs = [GradeItem(conv("x" * n, f"c{n}")) for n in (0, 5, 20, 80)]
    with load_component("reward:test_length", config={"target": 30}) as local, \
            load_component("reward:test_length", config={"target": 30}, runtime="subprocess") as remote:
        assert remote.grade(convs) == local.grade(convs)
        assert list(remote.grade_many([convs, convs[:1]])) == list(local.grade_many([convs, convs[:1]]))
        assert remote.identity() == local.identity()
        assert isinstance(remote, type(local).__mro__[1])  # both are stateset_agents.Reward


def test_batches_travel_as_jsonl_where_the_server_lists_it_and_as_items_where_it_does_not():
    """The JSONL fast path (conversations and grades as one bytes field a batch) gives the rows the typed path
    gives; a server that does not list the feature (an older one) is sent items, and replies as it can."""
    from stateset_agents.core.jsonio import dumps_line
    from stateset_agents.core.runtimes import wire

    raw = b'{"id": "r1", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "yy"}]}'
    items = [GradeItem(conv("x" * n, f"c{n}")) for n in (0, 5, 20)] + [GradeItem(conv("yy", "r1"), raw_json=raw)]
    with load_component("reward:test_length", config={"target": 30}) as local, \
            load_component("reward:test_length", config={"target": 30}, runtime="subprocess") as remote:
        assert wire.CONVERSATIONS_JSONL in remote.features
        assert remote._request(items).conversations_jsonl.count(b"\n") == len(items)
        expected = local.grade(items)
        rows = remote.grade(items)
        assert rows == expected and rows.jsonl == b"".join(map(dumps_line, expected))
        # Explicit turns are not expressible as JSONL lines: they go as items.
        assert not remote._request([GradeItem(conv("zz"), turns=[1])]).conversations_jsonl
        # A malformed batch is the caller's error, named as such.
        for body, why in ((b'{"id": "a"}', "end with a newline"), (b"[1]\n", "not a JSON object"),
                          (b"{\n", "not JSON")):
            req = remote._request([])
            req.conversations_jsonl = body
            with pytest.raises(PluginError, match=why):
                remote.conn.unary("Reward.Grade", remote._stub.Grade, req)
        remote.features = frozenset()
        assert not remote._request(items).items[0].HasField("conversation")  # JSON bytes, not typed
        assert remote.grade(items) == expected


def test_a_jsonl_reply_that_is_not_one_row_a_line_fails_closed():
    from stateset_agents.core.runtimes.client import _jsonl_rows

    assert _jsonl_rows(b'{"a":1}\n{"b":"x\\ny"}\n', "reward:r", "Reward.Grade") == [{"a": 1}, {"b": "x\ny"}]
    for bad in (b'{"a":1}', b'{"a":1},{"b":2}\n', b'{"a":\n1}\n', b"\n", b'{"a":1}\n\n'):
        with pytest.raises(PluginError, match="reward:r.*Reward.Grade.*grades_jsonl"):
            _jsonl_rows(bad, "reward:r", "Reward.Grade")


def _line(cid: str, text: str) -> GradeItem:
    """An item as `improve` makes it: the line as read, and the assistant turns found in it."""
    conversation = conv(text, cid)
    return GradeItem(conversation, raw_json=orjson.dumps(conversation), assistant_turns=[1])


def test_screened_conversations_cost_the_plugin_no_parse_and_their_rows_are_the_same_bytes():
    """A line the reward screens out is named in the reply, not graded, and the kernel writes its rows: the JSONL
    is byte for byte what grading every line in process gives; the list holds the other lines' rows."""
    from stateset_agents.core.jsonio import dumps_line
    from stateset_agents.core.runtimes import wire

    items = [_line("skip-1", "aaaa"), _line("c2", "bbbbbbbb"), _line("skip-3", ""), _line("c4", "cc")]
    items.append(GradeItem(conv("dddd", "skip-5")))  # no raw line: sent encoded, and screened all the same
    with load_component("reward:test_screening", config={"target": 8}) as local, \
            load_component("reward:test_screening", config={"target": 8}, runtime="subprocess") as remote:
        assert wire.SCREENED_LINES in remote.features
        expected = local.grade(items)
        assert [r["reason"] for r in expected].count(local.SKIPPED) == 3
        [rows] = remote.grade_many([items], screened=True)
        assert rows.jsonl == b"".join(map(dumps_line, expected))
        assert rows.screened == {0, 2, 4} and rows.screened_rows == 3
        assert list(rows) == [expected[1], expected[3]]
        # Not asked for, nothing is screened: every row is in the list.
        assert list(remote.grade_many([items])) == [expected]
        assert remote.grade(items) == expected


def test_a_malformed_screened_reply_fails_closed():
    from stateset_agents.core.contracts import reward_pb2
    from stateset_agents.core.runtimes.client import _rows

    items = [_line("a", "xx"), _line("b", "yy")]
    tail = b'"score":0.0,"applicable":false,"breakdown":{},"reason":"r","reward":{}}\n'
    good = reward_pb2.GradeReply(screened=[0], screened_tail=[0], row_tails=[tail],
                                 grades_jsonl=b'{"conversation_id":"b","turn_index":1}\n')
    assert _rows(good, "reward:r", "Reward.GradeStream", items).jsonl.startswith(
        b'{"conversation_id":"a","turn_index":1,"score":0.0')
    with pytest.raises(PluginError, match="did not accept"):
        _rows(good, "reward:r", "Reward.Grade")
    bad_tails = (b'"score":0.0,"applicable":true,"breakdown":{}}\n',  # applicable
                 b'"score":0.0,"applicable":false,"breakdown":{},"conversation_id":"z"}\n',  # overrides the id
                 b'"score":0.0,"applicable":false,\n"breakdown":{}}\n',  # two lines
                 b'"score":2.0,"applicable":false,"breakdown":{}}\n',  # out of range
                 b'"score":0.0,"applicable":false,"breakdown":{}')  # no newline
    for bad in bad_tails:
        reply = reward_pb2.GradeReply(screened=[0], screened_tail=[0], row_tails=[bad])
        with pytest.raises(PluginError, match="reward:r.*Reward.GradeStream.*screened"):
            _rows(reply, "reward:r", "Reward.GradeStream", items)
    # Out of the batch, named twice, no such tail, a line without its tail.
    for lines, tails in (([2], [0]), ([0, 0], [0, 0]), ([1], [1]), ([0, 1], [0])):
        reply = reward_pb2.GradeReply(screened=lines, screened_tail=tails, row_tails=[tail])
        with pytest.raises(PluginError, match="screened"):
            _rows(reply, "reward:r", "Reward.GradeStream", items)


def test_config_travels_in_the_request_and_is_validated_by_the_plugin():
    with load_component("reward:test_length", config={"target": 0}, runtime="subprocess") as remote:
        with pytest.raises(PluginError, match="Reward.Grade.*target"):
            remote.grade([GradeItem(conv("hi"))])


def test_a_plugin_that_raises_is_reported_with_plugin_call_and_message(faulty):
    with pytest.raises(PluginError) as err:
        faulty.grade([GradeItem(conv("please RAISE"))])
    msg = str(err.value)
    assert "reward:test_faulty" in msg and "Reward.Grade" in msg and "asked to raise" in msg
    # The server survives a raising call.
    assert faulty.grade([GradeItem(conv("ok"))])[0]["score"] == 1.0


def test_out_of_range_scores_are_refused_not_clamped(faulty):
    with pytest.raises(PluginError, match=r"\[0, 1\]"):
        faulty.grade([GradeItem(conv("BADSCORE"))])


def test_a_plugin_that_dies_mid_call_is_an_error_never_an_empty_success():
    with load_component("reward:test_faulty", runtime="subprocess") as r:
        with pytest.raises(PluginError) as err:
            r.grade([GradeItem(conv("DIE now"))])
    assert "exited with code 17" in str(err.value)


def test_a_hung_unary_call_hits_its_deadline(monkeypatch):
    from stateset_agents.core.runtimes import wire

    monkeypatch.setattr(wire, "UNARY_DEADLINE_SECONDS", 1.0)
    with load_component("reward:test_faulty", runtime="subprocess") as r:
        t0 = time.time()
        with pytest.raises(PluginError, match="deadline"):
            r.grade([GradeItem(conv("HANG"))])
        assert time.time() - t0 < 10


def test_long_streams_carry_heartbeats_and_cancel_stops_them(monkeypatch):
    with load_component("trainer:test_countdown", runtime="subprocess") as trainer:
        events = []
        for event in trainer.run({"steps": 50, "delay": 0.05}):
            events.append(event)
            if len(events) == 3:
                trainer.cancel()
        assert events[-1]["type"] == "failed" and events[-1]["reason"] == "cancelled"
        assert len(events) < 50


def test_a_stream_that_stops_without_heartbeats_fails_after_the_idle_timeout(monkeypatch):
    from stateset_agents.core.runtimes import wire

    # The server sends heartbeats every 5 s by default; a 0.5 s idle timeout must trip on a 2 s quiet step.
    monkeypatch.setattr(wire, "IDLE_TIMEOUT_SECONDS", 0.5)
    with load_component("trainer:test_countdown", runtime="subprocess") as trainer:
        with pytest.raises(PluginError, match="no event or heartbeat"):
            list(trainer.run({"steps": 2, "delay": 2.0}))


def test_heartbeats_keep_a_slow_stream_alive(monkeypatch):
    from stateset_agents.core.runtimes import wire

    monkeypatch.setenv("STATESET_PLUGIN_HEARTBEAT_S", "0.2")
    monkeypatch.setattr(wire, "IDLE_TIMEOUT_SECONDS", 1.0)
    with load_component("trainer:test_countdown", runtime="subprocess") as trainer:
        events = list(trainer.run({"steps": 1, "delay": 2.0}))
    assert events[-1]["type"] == "completed"


def test_a_trainer_process_that_dies_mid_stream_fails_the_run():
    with load_component("trainer:test_countdown", runtime="subprocess") as trainer:
        with pytest.raises(PluginError, match="exited with code 9"):
            list(trainer.run({"steps": 5, "die_at": 2}))


def test_malformed_handshake_is_a_clear_error_and_the_child_is_cleaned_up():
    spec = get_registry().resolve("reward:test_length")
    script = "import sys, time; print('hello, not json'); sys.stdout.flush(); time.sleep(60)"
    with pytest.raises(PluginError, match="handshake"):
        launch_subprocess(spec, argv=[sys.executable, "-c", script])


def test_a_plugin_that_never_prints_a_handshake_times_out_and_is_killed():
    spec = get_registry().resolve("reward:test_length")
    script = "import os, time; print(os.getpid(), file=open('/dev/stderr','w')); time.sleep(60)"
    t0 = time.time()
    with pytest.raises(PluginError, match="no handshake line within 1s"):
        launch_subprocess(spec, argv=[sys.executable, "-c", script], handshake_timeout=1)
    assert time.time() - t0 < 15


def test_no_common_contract_version_is_refused_with_both_versions_named():
    line = json.dumps({"protocol": "stateset-plugin", "contract_versions": [7], "transport": "grpc",
                       "address": "unix:///x", "pid": 1})
    with pytest.raises(ContractMismatch) as err:
        parse_handshake(line, "reward:x")
    assert "[7]" in str(err.value) and "[1]" in str(err.value)


def test_the_plugin_exits_when_its_launcher_dies(tmp_path):
    launcher = tmp_path / "launcher.py"
    launcher.write_text(
        "import sys, time\n"
        "from stateset_agents.core.runtimes import load_component\n"
        "r = load_component('reward:test_length', runtime='subprocess')\n"
        "print(r.pid, flush=True)\n"
        "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, str(launcher)], stdout=subprocess.PIPE, text=True)
    plugin_pid = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            os.kill(plugin_pid, 0)
        except ProcessLookupError:
            return
        # reap if it became our zombie? it is the launcher's child, re-parented to init
        time.sleep(0.2)
    pytest.fail(f"plugin pid {plugin_pid} outlived its launcher")


def test_serve_without_a_token_explains_and_exits_non_zero():
    env = {k: v for k, v in os.environ.items() if k != "STATESET_PLUGIN_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "stateset_agents", "plugin", "serve", "reward:test_length"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode != 0
    assert "started by the kernel" in out.stderr


def test_the_launchers_light_entry_point_refuses_as_plugin_serve_does():
    entry = [sys.executable, "-m", "stateset_agents.core.runtimes.serve"]
    env = {k: v for k, v in os.environ.items() if k != "STATESET_PLUGIN_TOKEN"}
    out = subprocess.run([*entry, "reward:test_length"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode != 0 and "started by the kernel" in out.stderr
    out = subprocess.run([*entry, "reward:test_unavailable"], capture_output=True, text=True, timeout=60,
                         env={**env, "STATESET_PLUGIN_TOKEN": "t"})
    assert out.returncode != 0 and "pip install no-such-module-xyz" in out.stderr and "Traceback" not in out.stderr
    with pytest.raises(PluginError, match="pip install no-such-module-xyz"):
        launch_subprocess(get_registry().resolve("reward:test_unavailable"))
