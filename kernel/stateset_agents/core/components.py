"""The Python face of each plugin kind.

A plugin author subclasses one of these and registers the class from a hook (see `hookspec.py`). The kernel hands
the pipeline an object with exactly this interface whichever runtime serves the component: the class itself
in-process, or a gRPC proxy (`runtimes/client.py`) that implements the same methods out of process.

Data crosses these interfaces in the shapes of the files between steps (plain dicts, JSON-compatible):

* conversation: ``{"id", "source": {"path", "sha256", "line"}, "messages": [...], "tools": [...], "metadata": {...}}``
  where a message is OpenAI-shaped: ``role``, ``content`` (str, list of parts, or None), ``tool_calls``
  (``[{"id", "type": "function", "function": {"name", "arguments"}}]``, arguments kept as logged), ``tool_call_id``,
  ``name``.
* grade: ``{"conversation_id", "turn_index", "score", "applicable", "breakdown", "reason", "reward"}``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Sequence

from .errors import InputError
from .calibration import calibrated_score, split_config
from .jsonio import digest

KINDS = ("ingestor", "reward", "trainer", "evaluator", "provider")


class Component:
    """Common to every kind: identity, configuration, cooperative cancellation."""

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    version: ClassVar[str] = "0.0.0"
    capabilities: ClassVar[tuple[str, ...]] = ()
    #: Optional JSON Schema for the configuration; validated when the component is built.
    config_schema: ClassVar[Mapping[str, Any] | None] = None

    @classmethod
    def example_config(cls) -> dict[str, Any]:
        """A configuration that works out of the box; the conformance suite builds the component with it."""
        return {}

    def __init__(self, config: Mapping[str, Any] | None = None):
        self.config: dict[str, Any] = dict(config or {})
        if self.config_schema is not None:
            _validate_config(self, self.config)
        self.config_sha256 = digest(self.config)
        self._cancel = threading.Event()

    @property
    def full_name(self) -> str:
        return f"{self.kind}:{self.name}"

    def cancel(self) -> None:
        """Ask long work to stop at its next safe point (gRPC `Cancel` lands here)."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def close(self) -> None:
        """Release resources. Out-of-process proxies shut their server down here."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


#: Schema keywords that an empty configuration ({}) always satisfies when the schema says it is an object.
_EMPTY_OK = frozenset({"type", "properties", "additionalProperties", "description", "title", "$schema", "$id",
                       "$defs", "definitions", "examples", "default"})


def _validate_config(component: Component, config: Mapping[str, Any]) -> None:
    schema = component.config_schema
    if not config and schema.get("type", "object") == "object" and set(schema) <= _EMPTY_OK:
        return  # nothing to check; importing jsonschema (~60 ms) would only delay the first grade
    import jsonschema  # only needed when there is something to check

    validator = jsonschema.Draft202012Validator(component.config_schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.path) or "(root)"
        raise InputError(f"invalid configuration for {component.kind}:{component.name}: {first.message}", field=where)


# ---------------------------------------------------------------------------------------------------------- rewards


@dataclass
class TurnGrade:
    """What a reward returns for one assistant turn. `score` must be in [0, 1]."""

    score: float
    applicable: bool = True
    breakdown: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    @classmethod
    def not_applicable(cls, reason: str, breakdown: dict[str, Any] | None = None) -> "TurnGrade":
        return cls(score=0.0, applicable=False, breakdown=breakdown or {}, reason=reason)


@dataclass
class GradeItem:
    """One conversation to grade; `turns` limits grading to those message indices (default: every assistant turn)."""

    conversation: dict[str, Any]
    turns: Sequence[int] | None = None
    #: The conversation's JSON as read from disk, when the caller has it: out-of-process runtimes send it as is.
    raw_json: bytes | None = None
    #: The conversation's assistant turns, when the caller found them already: an out-of-process runtime writes the
    #: rows of a conversation its reward screened out from them.
    assistant_turns: Sequence[int] | None = None


class GradeRows(list):
    """Grade rows as an out-of-process reward sent them, with `jsonl`: the rows as compact JSON lines, byte for byte
    what `dumps_line` makes of each row, so they are written on without being encoded again.

    `screened`: the positions in the batch of the conversations the reward screened out (`Reward.screen`, asked
    for with `grade_many(..., screened=True)`). Their rows, every one not applicable, are in `jsonl` (there are
    `screened_rows` of them) but not in the list."""

    __slots__ = ("jsonl", "screened", "screened_rows")

    def __init__(self, rows: Iterable[dict[str, Any]], jsonl: bytes, screened: frozenset[int] = frozenset(),
                 screened_rows: int = 0):
        super().__init__(rows)
        self.jsonl, self.screened, self.screened_rows = jsonl, screened, screened_rows


def assistant_turns(conversation: Mapping[str, Any]) -> list[int]:
    return [i for i, m in enumerate(conversation.get("messages") or ()) if m.get("role") == "assistant"]


class Reward(Component):
    """Grades assistant turns, each with its conversation prefix as context. Offline and deterministic.

    Implement `grade_turn`. `messages[:turn_index]` is the context, `messages[turn_index]` the turn graded; later
    messages may be read only where the reward documents why (e.g. a tool result that shows the call's effect).
    """

    kind = "reward"

    def __init__(self, config: Mapping[str, Any] | None = None):
        # A calibration (`calibration.py`) is the kernel's, not the reward's: the reward never sees it, but the
        # config's sha256, and so every grade row's identity, covers it.
        own, self.calibration = split_config(config)
        super().__init__(own)
        if self.calibration is not None:
            self.config_sha256 = digest(dict(config or {}))

    def grade_turn(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        raise NotImplementedError

    def identity(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "config_sha256": self.config_sha256}

    def grade(self, items: Iterable[GradeItem]) -> list[dict[str, Any]]:
        """Grade many conversations at once: one grade row per requested assistant turn, in order."""
        identity = self.identity()
        who = self.full_name
        rows: list[dict[str, Any]] = []
        for item in items:
            conv = item.conversation
            if item.turns is None:  # every assistant turn: nothing to check
                # the caller's list of them where it found them already (a copy: the reward may change its own)
                found = item.assistant_turns
                turns = assistant_turns(conv) if found is None else list(found)
            else:
                turns = list(item.turns)
                messages = conv.get("messages") or ()
                for t in turns:
                    if not (0 <= t < len(messages)) or messages[t].get("role") != "assistant":
                        raise InputError(f"turn {t} of conversation {conv.get('id')!r} is not an assistant message",
                                         field="turn_index")
            grades = self.grade_conversation(conv, turns)
            if len(grades) != len(turns):
                raise ValueError(f"{who} graded {len(grades)} of the {len(turns)} turns asked")
            cid = str(conv.get("id", ""))
            rows.extend([make_grade_row(cid, t, g, identity, who) for t, g in zip(turns, grades)])
        if self.calibration is not None:
            for row in rows:
                calibrate_row(row, self.calibration)
        return rows

    def screen(self, raw_json: bytes) -> str | None:
        """Optional, for speed out of process: the reason no turn of this conversation is applicable, decided from
        its JSON text without parsing it, or None (the default) to grade it as usual. Where it answers, it must
        answer what `grade_conversation` would: every turn `TurnGrade.not_applicable(reason)`. A plugin server asks
        it before parsing a line the kernel has already read; in process the kernel has parsed it, so nothing asks."""
        return None

    def grade_conversation(self, conversation: Mapping[str, Any], turns: Sequence[int]) -> list[TurnGrade]:
        """The grades of `turns` (checked assistant turns of `conversation`), in order. The default calls
        `grade_turn` for each; a reward overrides this to derive what every turn of a conversation needs once
        (parsed tool calls, texts, a replay of earlier turns), giving the same grades as `grade_turn` would."""
        return [self.grade_turn(conversation, t) for t in turns]

    def grade_many(self, batches: Iterable[list[GradeItem]], *,
                   screened: bool = False) -> Iterator[list[dict[str, Any]]]:
        """Grade a stream of batches, yielding each batch's rows in order. Out-of-process proxies pipeline this, and
        with `screened` may answer a batch with `GradeRows` that leave the screened conversations' rows out of
        the list (they are in its `jsonl`). In process every row is in the list."""
        for batch in batches:
            yield self.grade(batch)


def make_grade_row(cid: str, turn: int, g: TurnGrade, identity: dict, who: str) -> dict[str, Any]:
    score = float(g.score)
    if not (0.0 <= score <= 1.0) or score != score:
        raise ValueError(f"{who} returned score {g.score!r} for turn {turn}; scores must lie in [0, 1]")
    return {
        "conversation_id": cid,
        "turn_index": turn,
        "score": score,
        "applicable": bool(g.applicable),
        "breakdown": g.breakdown,
        "reason": g.reason.splitlines()[0] if g.reason else "",
        "reward": identity,
    }


def calibrate_row(row: dict[str, Any], calibration: Mapping[str, Any]) -> None:
    """Re-score an applicable grade row with a calibration, keeping the reward's own score beside it."""
    if row["applicable"]:
        row["uncalibrated_score"] = row["score"]
        row["score"] = calibrated_score(calibration, row["breakdown"])


# -------------------------------------------------------------------------------------------------------- ingestors


@dataclass
class Source:
    """One input file: `path` as the user gave it (recorded in lineage), `local_path` where this process reads it."""

    path: str
    sha256: str
    local_path: str = ""

    def __post_init__(self):
        self.local_path = self.local_path or self.path


@dataclass
class Reject:
    """A line that could not be ingested, and why."""

    path: str
    line: int
    reason: str  # a short stable code: invalid_json, unknown_role, orphan_tool_result, wrong_type, no_messages, ...
    detail: str = ""
    field: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "reason": self.reason, "field": self.field, "detail": self.detail}


class LinesNeedContext(Exception):
    """Raised by `Ingestor.ingest_lines(..., part=True)`: these lines cannot be ingested apart from the rest of
    their file (e.g. a call log, stitched with other lines of its conversation)."""


class Ingestor(Component):
    """Parses one log format into conversations. Implement `ingest`: yield conversation dicts (with `source`) and
    `Reject`s, in input order. Duplicate removal, redaction and writing are the kernel's job.

    An ingestor that can also ingest a file's lines in runs (`ingest --workers N` parses runs on several
    processes) sets `splittable` and implements `ingest_lines`, keeping this promise: `ingest(source)` yields what
    `ingest_lines(source, <all its lines>)` yields; and `ingest_lines(source, run, part=True)`, for any run of the
    file's lines, either yields exactly what `ingest` yields for those lines, in the same order, depending on no
    other line and leaving nothing behind that a later line would depend on, or raises `LinesNeedContext`. So the
    file's output is the runs' outputs in order, up to the first run that raised, then `ingest_lines(source,
    <the lines from that run's first on>)`."""

    kind = "ingestor"
    #: True when `ingest_lines` keeps the promise above.
    splittable: ClassVar[bool] = False

    def ingest(self, source: Source) -> Iterator[dict[str, Any] | Reject]:
        raise NotImplementedError

    def ingest_lines(self, source: Source, lines: Iterable[tuple[int, bytes]], *,
                     part: bool = False) -> Iterator[dict[str, Any] | Reject]:
        """Ingest `lines` of `source`: (line number from 1, the line without its newline), blank lines left out,
        in order. Without `part`, they are the file from some line to its end, and none before them left state
        behind; with `part`, they are one run of the file, to be ingested apart from the rest (see the class)."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------- long work: train, evaluate


class StreamingComponent(Component):
    """Long work runs as a generator of events (dicts with a "type"): progress, metrics, checkpoint, log, completed,
    failed. The last event is `completed` or `failed`; a stream that ends without one is a failure."""

    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        raise NotImplementedError


class Trainer(StreamingComponent):
    kind = "trainer"

    @classmethod
    def python_api(cls) -> dict[str, Any]:
        """Names `stateset_agents.training.<name>_trainer` exports for this trainer (its Python classes beside the
        component, e.g. ``GSPOTrainer``, ``GSPOConfig``, ``train_with_gspo``). Called on first use of that module;
        none by default."""
        return {}


class Evaluator(StreamingComponent):
    kind = "evaluator"


class Provider(Component):
    """Rents compute for remote training. Each method takes and returns JSON-shaped dicts (docs/remote.md).

    * `quote(request)`: ``{"provider", "gpu" (resolved id), "usd_per_gpu_hour", "storage_usd", "priced",
      "source", "quoted_at", "image": {"name", "digest"} or {"ref", "problem"}, "live"?, "live_needs"?,
      "gpu_default"?}``. A quote never needs the image (a ``problem`` says what is wrong with it; the kernel refuses
      it after showing the price); ``live: false`` marks a dated fallback price (``live_needs`` says what a live one
      needs: a launch re-quotes); ``gpu_default`` says the GPU was the provider's default. Unknown GPUs raise
      InputError.
    * `launch(plan)`: look the run id up first and attach to a job it names; only then create one, with the run id
      in its name and environment and a deadline enforced on the remote side. ``{"job_id", "created_at",
      "deadline_at", "attached"}``.
    * `status(run_id)`: ``{"state": pending|running|succeeded|stopped|failed|terminated|missing, "uptime_s",
      "cost_per_hour", "spend_usd"?, "message"?}``. `terminate(run_id)` destroys (not merely stops) the job.
    * `list_jobs()`: every live job labelled as ours, each with its ``run_id``.
    * `artifacts({"run_id"})`: the job's receipt (files with sha256 and size); `read_artifact({"run_id", "path",
      "offset", "length"})`: ``{"data_b64", "eof"}``.
    * `chat_open(request)`: a chat session with a collected run's adapter (`chat-remote`): ``{"session_id",
      "run_id", "adapter" {"dir", "files"}, "manifest", "base_model", "quote", "created_at", "deadline_at",
      "max_minutes", "max_new_tokens", "storage_gb", "image"}``; like `launch`, it looks the session id up before it creates anything and enforces
      the deadline remotely. ``{"job_id", "created_at", "deadline_at", "attached"}``. The session is then a job for
      `status` (``"ready"``: it answers turns), `terminate` and `list_jobs`, under its session id.
    * `chat_turn({"session_id", "messages", "tools", "temperature", "max_new_tokens", "seed"})`: one reply,
      the chat evaluator's final event (``{"type": "completed", "message", "text", "truncated", "tokens"}`` or
      ``{"type": "failed", "message"}``), with ``"usage"`` where the provider bills tokens.
    * `stop(run_id)`: a COOPERATIVE stop: the job's worker saves a full checkpoint at the next safe boundary and
      ends in state ``stopped`` (its receipt written as for ``succeeded``); nothing is killed. ``{"run_id",
      "requested": bool, "message"?}``. The mechanism is the provider's: `plugin_api.jobs.STOP_FILE` in the job
      directory, or ``POST /stop`` on a pod's HTTP front. Without it (NotImplementedError) the kernel points to
      `finetune cancel`, which terminates.
    * `logs({"run_id", "offset", "length"?})`: bytes of the job's ``events.jsonl`` from ``offset``:
      ``{"data_b64", "offset" (the next one), "eof": bool}``.
    * `status` may add ``"checkpoints"`` (the worker's `plugin_api.checkpoints.checkpoint_table` of the job's run),
      ``"quarantined"`` (the record or None) and ``"stop_requested"``; ``stopped`` is a final state.
    """

    kind = "provider"

    def quote(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def launch(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def status(self, run_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def terminate(self, run_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def list_jobs(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def artifacts(self, request: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def read_artifact(self, request: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def chat_open(self, request: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def chat_turn(self, request: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def stop(self, run_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def logs(self, request: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


BASE_CLASSES: dict[str, type[Component]] = {
    "ingestor": Ingestor,
    "reward": Reward,
    "trainer": Trainer,
    "evaluator": Evaluator,
    "provider": Provider,
}
