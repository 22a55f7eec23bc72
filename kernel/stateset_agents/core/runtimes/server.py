"""`stateset-agents plugin serve KIND:NAME`: one component behind gRPC.

The launcher (kernel) starts us with a fresh token in STATESET_PLUGIN_TOKEN; we bind a unix socket in a private
directory (or a TCP port), print ONE handshake line on stdout, and serve until Shutdown, until our launcher dies
(stdin reaches EOF, or the parent pid disappears), or until SIGTERM.
"""
from __future__ import annotations

import gc
import hmac
import json
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import traceback
from concurrent import futures
from typing import Any, Callable, Iterator

import grpc
import orjson
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from .._version import __version__
from ..components import Component, GradeItem, Reject, Reward, Source, TurnGrade, make_grade_row
from ..contracts import (CONTRACT_VERSIONS, common_pb2, evaluator_pb2_grpc, ingestor_pb2, ingestor_pb2_grpc,
                         plugin_pb2, plugin_pb2_grpc, provider_pb2, provider_pb2_grpc, reward_pb2,
                         reward_pb2_grpc, trainer_pb2_grpc)
from ..errors import InputError, StatesetError
from ..jsonio import dumps_line, rare_gc
from ..registry import ComponentSpec
from . import convert, wire


class _AuthInterceptor(grpc.ServerInterceptor):
    """Refuses every call without the launch token, except health checks (so probes work without secrets)."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong plugin token")

        self._deny = deny

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith("/grpc.health.v1.Health/"):
            return continuation(handler_call_details)
        supplied = dict(handler_call_details.invocation_metadata or ()).get(wire.AUTH_HEADER, "")
        if hmac.compare_digest(supplied.encode(), self._expected):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(lambda it, ctx: self._deny(None, ctx))
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(self._deny)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(lambda it, ctx: self._deny(None, ctx))
        return grpc.unary_unary_rpc_method_handler(self._deny)


class ComponentHost:
    """Builds the component for each configuration it is asked for (cached by config digest) and tracks long
    calls so `Cancel` can reach them."""

    def __init__(self, spec: ComponentSpec):
        self.spec = spec
        self.cls = spec.load_class()
        self._instances: dict[str, Component] = {}
        self._lock = threading.Lock()
        self._calls: dict[str, Component] = {}

    def component(self, config: common_pb2.ComponentConfig, *, fresh: bool = False) -> Component:
        if fresh:
            return self.cls(orjson.loads(config.json) if config.json else {})
        key = config.sha256 or config.json.decode()
        with self._lock:
            inst = self._instances.get(key)
            if inst is None:  # parsed once per configuration (a policy rides in every grading request)
                inst = self._instances[key] = self.cls(orjson.loads(config.json) if config.json else {})
            return inst

    def track(self, call_id: str, comp: Component) -> None:
        if call_id:
            self._calls[call_id] = comp

    def untrack(self, call_id: str) -> None:
        self._calls.pop(call_id, None)

    def cancel(self, call_id: str) -> bool:
        comp = self._calls.get(call_id)
        if comp is not None:
            comp.cancel()
        return comp is not None

    def close(self) -> None:
        for inst in list(self._instances.values()):
            inst.close()


def _guard(call: str, fn: Callable) -> Callable:
    """Turn a component's exception into a gRPC error the kernel reports with the call and the message."""

    def wrapped(request, context):
        try:
            return fn(request, context)
        except (InputError, StatesetError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{type(exc).__name__}: {exc}")
        except NotImplementedError as exc:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, str(exc))
        except Exception as exc:  # noqa: BLE001 - every failure must reach the kernel
            traceback.print_exc(file=sys.stderr)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    return wrapped


def _guard_stream(call: str, fn: Callable) -> Callable:
    def wrapped(request, context):
        try:
            yield from fn(request, context)
        except grpc.RpcError as exc:
            if not context.is_active():
                return  # the client went away (it cancelled, or stopped early): nobody is left to tell
            traceback.print_exc(file=sys.stderr)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        except (InputError, StatesetError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    return wrapped


_END = object()


def with_heartbeats(produce: Iterator[Any], context, on_cancel: Callable[[], None]) -> Iterator[Any]:
    """Run `produce` in a worker thread and yield its items, or `None` (a heartbeat) whenever it is quiet for
    HEARTBEAT_SECONDS. If the client goes away, ask the work to stop."""
    q: queue.Queue = queue.Queue(maxsize=256)

    def pump():
        try:
            for item in produce:
                q.put(item)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the serving thread
            q.put(exc)
        q.put(_END)

    context.add_callback(on_cancel)  # called when the RPC ends for any reason, including client cancel
    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            item = q.get(timeout=wire.HEARTBEAT_SECONDS)
        except queue.Empty:
            yield None
            continue
        if item is _END:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def _heartbeat_event() -> common_pb2.Event:
    return common_pb2.Event(type="heartbeat", json=orjson.dumps({"time": time.time()}))


class PluginServicer(plugin_pb2_grpc.PluginServicer):
    def __init__(self, host: ComponentHost, stop: threading.Event):
        self.host, self.stop = host, stop

    def GetMetadata(self, request, context):
        s = self.host.spec
        return plugin_pb2.Metadata(kind=s.kind, name=s.name, version=s.version, capabilities=list(s.capabilities),
                                   contract_versions=list(CONTRACT_VERSIONS), package=s.package,
                                   kernel_version=__version__, features=wire.FEATURES.get(s.kind, ()))

    def Shutdown(self, request, context):
        self.stop.set()
        return plugin_pb2.ShutdownReply()

    def Cancel(self, request, context):
        return common_pb2.CancelReply(found=self.host.cancel(request.call_id))


class RewardServicer(reward_pb2_grpc.RewardServicer):
    def __init__(self, host: ComponentHost):
        self.host = host
        self.Grade = _guard("Reward.Grade", self._grade)
        self.GradeStream = _guard_stream("Reward.GradeStream", self._grade_stream)

    def _grade_one(self, request) -> reward_pb2.GradeReply:
        reward = self.host.component(request.config)
        if request.conversations_jsonl:
            if request.items:
                raise InputError("a batch comes as items or as conversations_jsonl, not both")
            lines = _jsonl_lines(request.conversations_jsonl)
            if request.accept_screened and request.jsonl_replies:
                return _grade_screened(reward, lines, request.batch_id)
            rows = reward.grade([GradeItem(_parse_line(line, n)) for n, line in enumerate(lines, start=1)])
        else:
            rows = reward.grade([GradeItem(orjson.loads(it.conversation_json) if it.conversation_json
                                           else convert.conversation_from_proto(it.conversation),
                                           None if it.all_assistant_turns else list(it.turns))
                                 for it in request.items])
        if request.jsonl_replies:  # the lines the kernel writes to graded.jsonl, encoded once, here
            return reward_pb2.GradeReply(grades_jsonl=b"".join(map(dumps_line, rows)), batch_id=request.batch_id)
        if request.json_replies:
            return reward_pb2.GradeReply(grades_json=orjson.dumps(rows), batch_id=request.batch_id)
        return reward_pb2.GradeReply(grades=[convert.grade_to_proto(r) for r in rows], batch_id=request.batch_id)

    def _grade(self, request, context):
        return self._grade_one(request)

    def _grade_stream(self, request_iterator, context):
        for request in request_iterator:
            yield self._grade_one(request)


def _jsonl_lines(data: bytes) -> list[bytes]:
    """The lines of a `conversations_jsonl` batch, the last of which must be ended by a newline."""
    lines = data.split(b"\n")
    if lines.pop():
        raise InputError("conversations_jsonl must end with a newline")
    return lines


def _parse_line(line: bytes, number: int) -> dict[str, Any]:
    try:
        conversation = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"line {number} of conversations_jsonl is not JSON: {exc}") from None
    if not isinstance(conversation, dict):
        raise InputError(f"line {number} of conversations_jsonl is not a JSON object")
    return conversation


def _grade_screened(reward: Reward, lines: list[bytes], batch_id: int) -> reward_pb2.GradeReply:
    """A batch's reply where the lines the reward screens out are named, not parsed or graded: the client writes
    their rows. The other lines are parsed and graded together, their rows in grades_jsonl."""
    screen = reward.screen
    reasons = [screen(line) for line in lines]
    rows = reward.grade([GradeItem(_parse_line(line, n))
                         for n, (line, why) in enumerate(zip(lines, reasons), start=1) if why is None])
    tails: dict[str, int] = {}
    screened, screened_tail = [], []
    for line, why in enumerate(reasons):
        if why is not None:
            screened.append(line)
            screened_tail.append(tails.setdefault(why, len(tails)))
    return reward_pb2.GradeReply(
        grades_jsonl=b"".join(map(dumps_line, rows)), batch_id=batch_id, screened=screened,
        screened_tail=screened_tail,
        row_tails=[_not_applicable_tail(why, reward.identity(), reward.full_name) for why in tails])


def _not_applicable_tail(reason: str, identity: dict[str, str], who: str) -> bytes:
    """What follows the id and turn in the encoded row of a turn graded `TurnGrade.not_applicable(reason)`: made
    by encoding such a row, so a screened line's rows are byte for byte what grading it would have written."""
    line = dumps_line(make_grade_row("", 0, TurnGrade.not_applicable(reason), identity, who))
    if not line.startswith(wire.ROW_HEAD):
        raise AssertionError(f"grade rows no longer start with the id and turn: {line[:60]!r}")
    return line[len(wire.ROW_HEAD):]


class IngestorServicer(ingestor_pb2_grpc.IngestorServicer):
    def __init__(self, host: ComponentHost):
        self.host = host
        self.Ingest = _guard_stream("Ingestor.Ingest", self._ingest)

    def _ingest(self, request, context):
        ingestor = self.host.component(request.config, fresh=True)
        self.host.track(request.call_id, ingestor)
        src = request.source
        records = ingestor.ingest(Source(path=src.path, sha256=src.sha256, local_path=src.local_path or src.path))
        try:
            for rec in with_heartbeats(records, context, ingestor.cancel):
                if rec is None:
                    yield ingestor_pb2.IngestRecord(event=_heartbeat_event())
                elif isinstance(rec, Reject):
                    yield ingestor_pb2.IngestRecord(reject=ingestor_pb2.IngestReject(
                        path=rec.path, line=rec.line, reason=rec.reason, detail=rec.detail, field=rec.field or ""))
                else:
                    yield ingestor_pb2.IngestRecord(conversation=convert.conversation_to_proto(rec))
            yield ingestor_pb2.IngestRecord(event=common_pb2.Event(type="completed", json=b"{}"))
        finally:
            self.host.untrack(request.call_id)


def _event_stream(host: ComponentHost, request, context):
    """Shared by Trainer.Train and Evaluator.Evaluate: run the component, stream its events with heartbeats."""
    comp = host.component(request.config, fresh=True)
    host.track(request.call_id, comp)
    body = orjson.loads(request.request_json) if request.request_json else {}
    try:
        for event in with_heartbeats(comp.run(body), context, comp.cancel):
            if event is None:
                yield _heartbeat_event()
                continue
            if not isinstance(event, dict) or not isinstance(event.get("type"), str) or not event["type"]:
                what = f"an event with no type: {event!r:.200}" if isinstance(event, dict) else \
                    f"{type(event).__name__} {event!r:.200}, not an event object"
                raise TypeError(f"{comp.full_name} yielded {what}")
            yield convert.event_to_proto(event)
    finally:
        host.untrack(request.call_id)


class TrainerServicer(trainer_pb2_grpc.TrainerServicer):
    def __init__(self, host: ComponentHost):
        self.Train = _guard_stream("Trainer.Train", lambda r, c: _event_stream(host, r, c))


class EvaluatorServicer(evaluator_pb2_grpc.EvaluatorServicer):
    def __init__(self, host: ComponentHost):
        self.Evaluate = _guard_stream("Evaluator.Evaluate", lambda r, c: _event_stream(host, r, c))


class ProviderServicer(provider_pb2_grpc.ProviderServicer):
    # rpc name -> (Provider method, how the request's JSON becomes its arguments)
    _METHODS = {
        "Quote": ("quote", lambda a: (a,)), "Launch": ("launch", lambda a: (a,)),
        "Status": ("status", lambda a: (a.get("run_id"),)), "Terminate": ("terminate", lambda a: (a.get("run_id"),)),
        "ListJobs": ("list_jobs", lambda a: ()), "Artifacts": ("artifacts", lambda a: (a,)),
        "ReadArtifact": ("read_artifact", lambda a: (a,)), "ChatOpen": ("chat_open", lambda a: (a,)),
        "ChatTurn": ("chat_turn", lambda a: (a,)), "Stop": ("stop", lambda a: (a.get("run_id"),)),
        "Logs": ("logs", lambda a: (a,)),
    }

    def __init__(self, host: ComponentHost):
        for rpc, (method, arguments) in self._METHODS.items():
            setattr(self, rpc, _guard(f"Provider.{rpc}", self._call(host, method, arguments)))

    @staticmethod
    def _call(host: ComponentHost, method: str, arguments: Callable):
        def call(request, context):
            provider = host.component(request.config)
            payload = orjson.loads(request.json) if request.json else {}
            try:
                result = getattr(provider, method)(*arguments(payload))
            except NotImplementedError as exc:  # an optional method it lacks: UNIMPLEMENTED, the client says so
                raise NotImplementedError(str(exc) or f"{provider.full_name} does not implement {method}") from None
            return provider_pb2.ProviderReply(json=orjson.dumps(result, default=str))
        return call


_ADD_SERVICER = {
    "reward": (RewardServicer, reward_pb2_grpc.add_RewardServicer_to_server),
    "ingestor": (IngestorServicer, ingestor_pb2_grpc.add_IngestorServicer_to_server),
    "trainer": (TrainerServicer, trainer_pb2_grpc.add_TrainerServicer_to_server),
    "evaluator": (EvaluatorServicer, evaluator_pb2_grpc.add_EvaluatorServicer_to_server),
    "provider": (ProviderServicer, provider_pb2_grpc.add_ProviderServicer_to_server),
}


def _watch_launcher(stop: threading.Event, watch_stdin: bool) -> None:
    """Exit when the launcher dies: its end of our stdin closes, or its pid stops being our parent."""
    parent = os.environ.get(wire.PARENT_PID_ENV)

    def stdin_eof():
        # The raw fd, not sys.stdin: a daemon thread blocked in a buffered read aborts interpreter shutdown.
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stop.set()

    def parent_gone():
        pid = int(parent)
        while not stop.wait(0.5):
            if os.getppid() != pid:
                stop.set()

    if watch_stdin:
        threading.Thread(target=stdin_eof, daemon=True).start()
    if parent and parent.isdigit():
        threading.Thread(target=parent_gone, daemon=True).start()


def launched_by_kernel() -> bool:
    """True when a launcher gave us a token; otherwise explain who starts this command."""
    if os.environ.get(wire.TOKEN_ENV):
        return True
    print("stateset-agents plugin serve is started by the kernel, which passes a fresh token in "
          f"{wire.TOKEN_ENV} and reads the handshake line this command prints. To use a plugin, run the "
          "pipeline command with --runtime subprocess (or container) instead.", file=sys.stderr)
    return False


def serve(spec: ComponentSpec, *, transport: str = "unix", host: str = "127.0.0.1", port: int = 0,
          socket_dir: str | None = None, watch_stdin: bool = True) -> int:
    if not launched_by_kernel():
        return 2
    token = os.environ[wire.TOKEN_ENV]
    component_host = ComponentHost(spec)  # raises ComponentUnavailable before we print a handshake
    stop = threading.Event()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), interceptors=[_AuthInterceptor(token)],
                         options=wire.CHANNEL_OPTIONS)
    plugin_pb2_grpc.add_PluginServicer_to_server(PluginServicer(component_host, stop), server)
    servicer_cls, add = _ADD_SERVICER[spec.kind]
    add(servicer_cls(component_host), server)
    health_servicer = health.HealthServicer()
    health_servicer.set(wire.HEALTH_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    sock_path = None
    if transport == "unix":
        directory = socket_dir or tempfile.mkdtemp(prefix="stateset-plugin-")
        os.chmod(directory, 0o700)
        sock_path = os.path.join(directory, "plugin.sock")
        server.add_insecure_port(f"unix://{sock_path}")
        address = f"unix://{sock_path}"
    else:
        bound = server.add_insecure_port(f"{host}:{port}")
        address = f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{bound}"
    server.start()
    if sock_path:
        os.chmod(sock_path, 0o600)

    handshake = {"protocol": wire.PROTOCOL, "contract_versions": list(CONTRACT_VERSIONS), "transport": "grpc",
                 "address": address, "pid": os.getpid()}
    sys.stdout.write(json.dumps(handshake) + "\n")
    sys.stdout.flush()

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    _watch_launcher(stop, watch_stdin)
    # What startup imported lives as long as we do: frozen, the collector's full passes skip it. Requests are
    # parsed JSON trees freed by reference counting, so the young-generation passes would find nothing.
    gc.freeze()
    try:
        with rare_gc():
            while not stop.wait(0.2):
                pass
    except KeyboardInterrupt:
        pass
    health_servicer.enter_graceful_shutdown()
    server.stop(grace=2).wait()
    component_host.close()
    if sock_path:
        try:
            os.unlink(sock_path)
            os.rmdir(os.path.dirname(sock_path))
        except OSError:
            pass
    return 0
