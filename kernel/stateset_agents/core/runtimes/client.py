"""Out-of-process components, seen from the kernel: proxies with exactly the in-process Python interface.

Every failure on the wire becomes a `PluginError` naming the component, the call and what happened (the plugin
raised, died, timed out, or refused us). A stream that ends without its final event is a failure, never a success.
"""
from __future__ import annotations

import functools
import queue
import threading
import time
import uuid
from collections import deque
from typing import Any, Callable, Iterable, Iterator, Mapping

import grpc
import orjson

from ..components import (Evaluator, GradeItem, GradeRows, Ingestor, Provider, Reject, Reward, Source, Trainer,
                          assistant_turns)
from ..contracts import (common_pb2, evaluator_pb2, evaluator_pb2_grpc, ingestor_pb2, ingestor_pb2_grpc,
                         plugin_pb2, plugin_pb2_grpc, provider_pb2, provider_pb2_grpc, reward_pb2,
                         reward_pb2_grpc, trainer_pb2, trainer_pb2_grpc)
from ..errors import PluginError
from . import convert, wire


class Connection:
    """A channel to one plugin server plus what is needed to explain its failures (the process, if we own it)."""

    def __init__(self, component: str, address: str, token: str, *, process=None, on_close: Callable | None = None):
        self.component, self.address, self.token, self.process = component, address, token, process
        self.channel = grpc.insecure_channel(address, options=wire.CHANNEL_OPTIONS)
        self.metadata = wire.bearer(token)
        self.plugin = plugin_pb2_grpc.PluginStub(self.channel)
        self._on_close = on_close
        self.closed = False

    def explain(self, call: str, exc: grpc.RpcError) -> PluginError:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if self.process is not None:
            try:
                rc = self.process.wait(timeout=1.0) if code in (grpc.StatusCode.UNAVAILABLE,
                                                                grpc.StatusCode.CANCELLED,
                                                                grpc.StatusCode.UNKNOWN,
                                                                grpc.StatusCode.INTERNAL) else self.process.poll()
            except Exception:  # noqa: BLE001 - still running
                rc = self.process.poll()
            if rc is not None:
                return PluginError(self.component, call,
                                   f"the plugin process (pid {self.process.pid}) exited with code {rc} during the "
                                   f"call ({code.name if code else 'error'}: {details})")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return PluginError(self.component, call, f"no answer before the deadline ({details})")
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return PluginError(self.component, call, f"the plugin refused our token ({details})")
        return PluginError(self.component, call, f"{code.name if code else 'error'}: {details}")

    def unary(self, call: str, method, request, timeout: float | None = None):
        try:
            return method(request, metadata=self.metadata, timeout=timeout or wire.UNARY_DEADLINE_SECONDS)
        except grpc.RpcError as exc:
            raise self.explain(call, exc) from None

    def stream(self, call: str, method, request, *, is_heartbeat: Callable[[Any], bool],
               idle_timeout: float | None = None) -> Iterator[Any]:
        """Yield a server stream's messages; fail if nothing (not even a heartbeat) arrives for idle_timeout, or
        only heartbeats for PROGRESS_TIMEOUT_SECONDS (the server answers, the component's work is stuck)."""
        idle = idle_timeout or wire.IDLE_TIMEOUT_SECONDS
        progress = wire.PROGRESS_TIMEOUT_SECONDS
        last = time.monotonic()
        rpc = method(request, metadata=self.metadata)
        q: queue.Queue = queue.Queue(maxsize=1024)
        done = object()

        def pump():
            try:
                for msg in rpc:
                    q.put(msg)
            except grpc.RpcError as exc:
                q.put(exc)
            q.put(done)

        threading.Thread(target=pump, daemon=True).start()
        try:
            while True:
                try:
                    msg = q.get(timeout=idle)
                except queue.Empty:
                    rpc.cancel()
                    raise PluginError(self.component, call,
                                      f"no event or heartbeat for {idle:.0f}s; the plugin is hung") from None
                if msg is done:
                    return
                if isinstance(msg, grpc.RpcError):
                    raise self.explain(call, msg)
                if not is_heartbeat(msg):
                    yield msg
                    last = time.monotonic()  # our own time with the event is not the plugin's
                elif time.monotonic() - last > progress:
                    rpc.cancel()
                    self.kill()  # hung inside the component: a graceful shutdown would wait on it
                    raise PluginError(self.component, call, f"only heartbeats for {progress:g}s, no event; the "
                                                            "plugin's work is hung")
        finally:
            rpc.cancel()  # a no-op after normal completion; stops the server work if we stop early

    def kill(self) -> None:
        """End a plugin process we own at once (it is hung: a graceful shutdown would wait on it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    def metadata_info(self) -> plugin_pb2.Metadata:
        return self.unary("Plugin.GetMetadata", self.plugin.GetMetadata, plugin_pb2.GetMetadataRequest(),
                          timeout=30)

    def cancel(self, call_id: str) -> None:
        try:
            self.plugin.Cancel(common_pb2.CancelRequest(call_id=call_id), metadata=self.metadata, timeout=10)
        except grpc.RpcError:
            pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.plugin.Shutdown(plugin_pb2.ShutdownRequest(), metadata=self.metadata, timeout=5)
        except grpc.RpcError:
            pass
        self.channel.close()
        if self._on_close:
            self._on_close()


class _RemoteMixin:
    """Identity from the server's metadata; configuration travels with every request."""

    def _init_remote(self, conn: Connection, meta: plugin_pb2.Metadata, config: Mapping[str, Any] | None):
        self.name, self.version = meta.name, meta.version
        self.capabilities = tuple(meta.capabilities)
        self.contract_versions = tuple(meta.contract_versions)
        self.features = frozenset(meta.features)
        self.conn = conn
        self.pid = conn.process.pid if conn.process is not None else None
        self._config_pb = convert.config_to_proto(self.config, self.config_sha256)

    def close(self) -> None:
        self.conn.close()


def _is_heartbeat_event(msg) -> bool:
    return msg.type == "heartbeat"


def _rows(reply: reward_pb2.GradeReply, who: str, call: str,
          batch: list[GradeItem] | None = None) -> list[dict[str, Any]]:
    if reply.screened or reply.row_tails:
        if batch is None:
            raise PluginError(who, call, "the reply names screened lines, which this call did not accept")
        return _with_screened(reply, batch, who, call)
    if reply.grades_jsonl:
        return _jsonl_rows(reply.grades_jsonl, who, call)
    if reply.grades_json:
        return orjson.loads(reply.grades_json)
    return [convert.grade_from_proto(g) for g in reply.grades]


def _jsonl_rows(data: bytes, who: str, call: str) -> GradeRows:
    """The rows of a `grades_jsonl` reply, parsed in one call (its newlines become the commas of an array: JSON text
    holds no raw newline inside a value), keeping the bytes to write on. One row a line, or it is refused: more
    values than lines would write a line with two rows."""
    bad = None
    if not data.endswith(b"\n"):
        bad = "does not end with a newline"
    else:
        try:
            rows = orjson.loads(b"[" + data[:-1].replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError as exc:
            bad = f"is not one JSON value a line ({exc})"
        else:
            if len(rows) != data.count(b"\n"):
                bad = "holds more than one value on a line"
    if bad:
        raise PluginError(who, call, f"the grades_jsonl reply {bad}")
    return GradeRows(rows, data)


def _with_screened(reply: reward_pb2.GradeReply, batch: list[GradeItem], who: str, call: str) -> GradeRows:
    """The batch's rows, where the reward screened some conversations out: theirs are written here, from the ids
    and assistant turns we read and the row tail the plugin encoded; the rest came as JSONL."""
    def refuse(why: str) -> PluginError:
        return PluginError(who, call, f"the reply's screened lines are malformed: {why}")

    graded = _jsonl_rows(reply.grades_jsonl, who, call) if reply.grades_jsonl else GradeRows([], b"")
    tails = list(reply.row_tails)
    for tail in tails:
        if (why := _tail_problem(tail)) is not None:
            raise refuse(why)
    if len(reply.screened) != len(reply.screened_tail):
        raise refuse(f"{len(reply.screened)} lines but {len(reply.screened_tail)} tails named")
    screened: dict[int, bytes] = {}
    for line, tail in zip(reply.screened, reply.screened_tail):
        if not 0 <= line < len(batch) or line in screened:
            raise refuse(f"line {line} is not in the batch of {len(batch)}, or is named twice")
        if not 0 <= tail < len(tails):
            raise refuse(f"tail {tail} of {len(tails)}")
        screened[line] = tails[tail]
    # The graded rows are one a line (checked): a line's rows are spliced in as one slice of the reply's bytes.
    data, start = graded.jsonl, 0
    parts: list[bytes] = []
    written = 0
    for position, item in enumerate(batch):
        turns = item.assistant_turns
        if turns is None:
            turns = assistant_turns(item.conversation)
        tail = screened.get(position)
        if tail is None:
            end = start
            for _ in turns:
                end = data.find(b"\n", end) + 1 or len(data)
            parts.append(data[start:end])
            start = end
        else:
            head = wire.screened_row_head(str(item.conversation.get("id", "")))
            parts.append(b"".join([b"%b%d,%b" % (head, turn, tail) for turn in turns]))
            written += len(turns)
    parts.append(data[start:])  # a surplus goes on, for the caller to refuse
    return GradeRows(graded, b"".join(parts), frozenset(screened), written)


@functools.lru_cache(maxsize=64)  # a reward sends the same few tails with every batch
def _tail_problem(tail: bytes) -> str | None:
    """What is wrong with a row tail, if anything: it must complete one not-applicable row on one line, and leave
    its id and turn alone."""
    if not tail.endswith(b"\n") or tail.count(b"\n") != 1:
        return "a row tail is not one line"
    try:
        row = orjson.loads(wire.ROW_HEAD + tail)
    except orjson.JSONDecodeError as exc:
        return f"a row tail does not complete a JSON row ({exc})"
    score = row.get("score") if isinstance(row, dict) else None
    if (not isinstance(row, dict) or row.get("conversation_id") != "" or row.get("turn_index") != 0
            or row.get("applicable") is not False or type(score) is not float or not 0.0 <= score <= 1.0
            or not isinstance(row.get("breakdown"), dict)):
        return f"a row tail does not make a not-applicable row: {tail[:80]!r}"
    return None


def _jsonl_line(item: GradeItem) -> bytes:
    """The item's conversation as one JSONL line: the line as read where it is one line, else encoded."""
    raw = item.raw_json
    if raw is not None and raw.find(b"\n") in (-1, len(raw) - 1):
        return raw if raw.endswith(b"\n") else raw + b"\n"
    return orjson.dumps(item.conversation, option=orjson.OPT_APPEND_NEWLINE)


class _ReplyWatch:
    """Cancels a stream whose next reply takes longer than `deadline`, so that a hung plugin fails the call. One
    thread for the stream: waiting for a reply only sets a time, which costs nothing per batch."""

    def __init__(self, call, deadline: float):
        self.call, self.deadline, self.expired = call, deadline, False
        self._since: float | None = None
        self._stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def next(self):
        self._since = time.monotonic()
        try:
            return next(self.call)
        finally:
            self._since = None

    def _watch(self) -> None:
        while not self._stopped.wait(min(1.0, self.deadline / 4)):
            since = self._since
            if since is not None and time.monotonic() - since > self.deadline:
                self.expired = True
                self.call.cancel()
                return

    def stop(self) -> None:
        self._stopped.set()


class RemoteReward(_RemoteMixin, Reward):
    config_schema = None  # validated by the server-side component

    def __init__(self, conn: Connection, meta, config=None):
        Reward.__init__(self, config)
        # The whole config travels, calibration included: the server's reward applies it, never this proxy too.
        self.config, self.calibration = dict(config or {}), None
        self._init_remote(conn, meta, config)
        self._stub = reward_pb2_grpc.RewardStub(conn.channel)

    def _request(self, items: list[GradeItem], batch_id: int = 0, screened: bool = False) -> reward_pb2.GradeRequest:
        req = reward_pb2.GradeRequest(config=self._config_pb, batch_id=batch_id, json_replies=True,
                                      jsonl_replies=True)
        if wire.CONVERSATIONS_JSONL in self.features and all(item.turns is None for item in items):
            req.conversations_jsonl = b"".join(map(_jsonl_line, items))
            req.accept_screened = screened and wire.SCREENED_LINES in self.features
            return req
        for item in items:
            pb = req.items.add()
            pb.conversation_json = item.raw_json or orjson.dumps(item.conversation)
            if item.turns is None:
                pb.all_assistant_turns = True
            else:
                pb.turns.extend(item.turns)
        return req

    def grade(self, items: Iterable[GradeItem]) -> list[dict[str, Any]]:
        reply = self.conn.unary("Reward.Grade", self._stub.Grade, self._request(list(items)))
        return _rows(reply, self.full_name, "Reward.Grade")

    def grade_many(self, batches: Iterable[list[GradeItem]], *, screened: bool = False,
                   in_flight: int = 2) -> Iterator[list[dict]]:
        """Pipelined: up to `in_flight` batches on one stream, so the plugin grades while we read on (with 2 the
        plugin already waits for us; 3 and 4 only kept more parsed batches out of the CPU cache).

        The caller's thread pulls the batches (parsing them, for `improve`) and encodes the requests; gRPC's sending
        thread only takes them from a queue. Pulling them in gRPC's thread instead made two of our threads take
        turns on the GIL for every batch, which cost more CPU than the grading it moved out. With `screened`, a
        batch's rows may be `GradeRows` that list only the conversations the reward did not screen out."""
        outbox: queue.Queue = queue.Queue()
        end = object()

        def requests():
            while (req := outbox.get()) is not end:
                yield req

        call = self._stub.GradeStream(requests(), metadata=self.conn.metadata)
        who, name = self.full_name, "Reward.GradeStream"
        pending: deque[list[GradeItem]] = deque()
        finished = False
        watch = _ReplyWatch(call, wire.UNARY_DEADLINE_SECONDS)  # each batch's reply has a unary call's deadline
        try:
            for i, batch in enumerate(batches):
                batch = list(batch)
                outbox.put(self._request(batch, batch_id=i, screened=screened))
                time.sleep(0)  # hand the GIL to gRPC's sending thread now, not when we next block (~2x less waiting)
                pending.append(batch)
                if len(pending) >= in_flight:
                    yield _rows(watch.next(), who, name, pending.popleft())
            outbox.put(end)
            while pending:
                yield _rows(watch.next(), who, name, pending.popleft())
            finished = True
        except grpc.RpcError as exc:
            if watch.expired:
                self.conn.kill()  # a hung plugin is not asked to shut down: it would not
                raise PluginError(who, name, f"no answer to a batch within {watch.deadline:g}s; the plugin is "
                                             "hung") from None
            raise self.conn.explain(name, exc) from None
        except StopIteration:
            raise PluginError(who, name, f"the stream ended with {len(pending)} batches unanswered") from None
        finally:
            watch.stop()
            outbox.put(end)
            if not finished:  # stop the plugin's work; a finished stream closes by itself
                call.cancel()


class RemoteIngestor(_RemoteMixin, Ingestor):
    config_schema = None

    def __init__(self, conn: Connection, meta, config=None):
        Ingestor.__init__(self, config)
        self._init_remote(conn, meta, config)
        self._stub = ingestor_pb2_grpc.IngestorStub(conn.channel)

    def ingest(self, source: Source) -> Iterator[dict[str, Any] | Reject]:
        call_id = uuid.uuid4().hex
        req = ingestor_pb2.IngestRequest(config=self._config_pb, call_id=call_id, source=ingestor_pb2.IngestSource(
            path=source.path, sha256=source.sha256, local_path=source.local_path))
        completed = False
        for rec in self.conn.stream("Ingestor.Ingest", self._stub.Ingest, req,
                                    is_heartbeat=lambda r: r.WhichOneof("record") == "event"
                                    and r.event.type == "heartbeat"):
            which = rec.WhichOneof("record")
            if which == "conversation":
                yield convert.conversation_from_proto(rec.conversation)
            elif which == "reject":
                r = rec.reject
                yield Reject(path=r.path, line=r.line, reason=r.reason, detail=r.detail, field=r.field or None)
            elif rec.event.type == "completed":
                completed = True
        if not completed:
            raise PluginError(self.full_name, "Ingestor.Ingest", "the stream ended before the plugin said it was done")


def _event(pb, who: str, call: str) -> dict[str, Any]:
    """An event off the wire, or a PluginError: its JSON must be an object, and it must have a type."""
    try:
        event = convert.event_from_proto(pb)
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise PluginError(who, call, f"a malformed event ({type(exc).__name__}: {exc}): {pb.json[:120]!r}") from None
    if not event["type"]:
        raise PluginError(who, call, f"an event with no type: {pb.json[:120]!r}")
    return event


class _RemoteStreaming(_RemoteMixin):
    _call_name = ""

    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        self._call_id = uuid.uuid4().hex
        req = self._request_cls(config=self._config_pb, call_id=self._call_id,
                                request_json=orjson.dumps(dict(request), default=str))
        final = None
        for pb in self.conn.stream(self._call_name, self._method, req, is_heartbeat=_is_heartbeat_event):
            event = _event(pb, self.full_name, self._call_name)
            if event["type"] in ("completed", "failed"):
                final = event
            yield event
        if final is None:
            raise PluginError(self.full_name, self._call_name,
                              "the stream ended without a completed or failed event")

    def cancel(self) -> None:
        super().cancel()
        if getattr(self, "_call_id", None):
            self.conn.cancel(self._call_id)


class RemoteTrainer(_RemoteStreaming, Trainer):
    config_schema = None
    _call_name = "Trainer.Train"
    _request_cls = trainer_pb2.TrainRequest

    def __init__(self, conn: Connection, meta, config=None):
        Trainer.__init__(self, config)
        self._init_remote(conn, meta, config)
        self._method = trainer_pb2_grpc.TrainerStub(conn.channel).Train


class RemoteEvaluator(_RemoteStreaming, Evaluator):
    config_schema = None
    _call_name = "Evaluator.Evaluate"
    _request_cls = evaluator_pb2.EvaluateRequest

    def __init__(self, conn: Connection, meta, config=None):
        Evaluator.__init__(self, config)
        self._init_remote(conn, meta, config)
        self._method = evaluator_pb2_grpc.EvaluatorStub(conn.channel).Evaluate


class RemoteProvider(_RemoteMixin, Provider):
    config_schema = None

    def __init__(self, conn: Connection, meta, config=None):
        Provider.__init__(self, config)
        self._init_remote(conn, meta, config)
        self._stub = provider_pb2_grpc.ProviderStub(conn.channel)

    def _call(self, name: str, payload: Any) -> Any:
        req = provider_pb2.ProviderRequest(config=self._config_pb, json=orjson.dumps(payload, default=str))
        reply = self.conn.unary(f"Provider.{name}", getattr(self._stub, name), req)
        return orjson.loads(reply.json) if reply.json else None

    def quote(self, plan):
        return self._call("Quote", dict(plan))

    def launch(self, plan):
        return self._call("Launch", dict(plan))

    def status(self, run_id: str):
        return self._call("Status", {"run_id": run_id})

    def terminate(self, run_id: str):
        return self._call("Terminate", {"run_id": run_id})

    def list_jobs(self):
        return self._call("ListJobs", {})

    def artifacts(self, request):
        return self._call("Artifacts", dict(request))

    def read_artifact(self, request):
        return self._call("ReadArtifact", dict(request))

    def chat_open(self, request):
        return self._call("ChatOpen", dict(request))

    def chat_turn(self, request):
        return self._call("ChatTurn", dict(request))

    def stop(self, run_id: str):
        return self._optional(wire.PROVIDER_STOP, "Stop", {"run_id": run_id})

    def logs(self, request):
        return self._optional(wire.PROVIDER_LOGS, "Logs", dict(request))

    def _optional(self, feature: str, name: str, payload: Any) -> Any:
        """An RPC added after the first revision: asked only of a server that lists it; a server without it, or a
        provider that does not implement it, is NotImplementedError here, as in process."""
        if feature not in self.features:
            raise NotImplementedError(f"{self.full_name} (kernel of an earlier contract revision) has no {name}")
        req = provider_pb2.ProviderRequest(config=self._config_pb, json=orjson.dumps(payload, default=str))
        try:
            reply = getattr(self._stub, name)(req, metadata=self.conn.metadata, timeout=wire.UNARY_DEADLINE_SECONDS)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise NotImplementedError(exc.details()) from None
            raise self.conn.explain(f"Provider.{name}", exc) from None
        return orjson.loads(reply.json) if reply.json else None


PROXIES = {"reward": RemoteReward, "ingestor": RemoteIngestor, "trainer": RemoteTrainer,
           "evaluator": RemoteEvaluator, "provider": RemoteProvider}
