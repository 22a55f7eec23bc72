"""The conformance suite: what each plugin kind's contract implies, checked against any registered component in any
runtime. It ships with the kernel so a third party runs it on their own plugin (`stateset-agents plugins check
NAME [--runtime R]`); the project's tests run it over every registered component.

    from stateset_agents.core.conformance import check_component
    failures = [r for r in check_component("reward:my_reward", ["inprocess", "subprocess"]) if not r.passed]

Every check runs in each runtime asked for, and wherever the contract says an answer is the component's own (grade
rows, rejects, a quote's price, a refusal), an out-of-process runtime must give the in-process answer. The suite
never spends money: a provider is asked for quotes and about runs that do not exist, never to launch.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from .components import GradeItem, Reject, Source, assistant_turns
from .errors import ComponentUnavailable, InputError, PluginError, StatesetError
from .jsonio import digest, dumps_line, sha256_file
from .registry import ComponentSpec, get_registry

#: Where a provider keeps its local state while it is checked (the kernel's own variable; a sandbox per check run).
STATE_DIR_ENV = "STATESET_AGENTS_STATE_DIR"
#: A run id no provider has: questions about it must be answered as "missing", or refused cleanly.
UNKNOWN_RUN = "sa-conformance-no-such-run"
#: The job states a provider's `status` may report (docs/remote.md).
JOB_STATES = ("pending", "running", "succeeded", "failed", "terminated", "missing", "ready")

SAMPLE_CONVERSATIONS: list[dict[str, Any]] = [
    {"id": "support-1", "source": {"path": "sample.jsonl", "sha256": "0" * 64, "line": 1},
     "messages": [
         {"role": "system", "content": "You are a helpful support agent."},
         {"role": "user", "content": "Where is my order 1234? Please check."},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_1", "type": "function",
              "function": {"name": "get_order", "arguments": "{\"order_id\": \"1234\"}"}}]},
         {"role": "tool", "tool_call_id": "call_1", "name": "get_order", "content": "{\"status\": \"shipped\"}"},
         {"role": "assistant", "content": "Your order 1234 has shipped and should arrive in two days."},
         {"role": "user", "content": "I want to talk to a human now."},
         {"role": "assistant", "content": "Of course, I am transferring you to a human agent."}],
     "tools": [{"type": "function", "function": {"name": "get_order", "description": "Look up an order.",
                                                 "parameters": {"type": "object",
                                                                "properties": {"order_id": {"type": "string"}},
                                                                "required": ["order_id"]}}}],
     "metadata": {"reference_answer": "1234", "expected_tool_calls": [
         {"name": "get_order", "arguments": {"order_id": "1234"}}]}},
    {"id": "math-1", "messages": [
        {"role": "user", "content": "What is 6 times 7?"},
        {"role": "assistant", "content": "6 x 7 = 42. The answer is 42."}],
     "tools": [], "metadata": {"reference_answer": "42"}},
]

GRADE_ROW_KEYS = {"conversation_id", "turn_index", "score", "applicable", "breakdown", "reason", "reward"}
QUOTE_KEYS = {"provider", "gpu", "usd_per_gpu_hour", "priced", "source", "quoted_at", "image"}


class CheckFailed(AssertionError):
    """One broken promise of the contract; the message says which and how."""


def expect(condition: Any, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


@dataclass(frozen=True)
class Result:
    component: str
    runtime: str
    check: str
    passed: bool
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"component": self.component, "runtime": self.runtime, "check": self.check, "passed": self.passed,
                "detail": self.detail}


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Any, "Context"], Any]
    #: the answer must be the in-process answer in every other runtime
    compare: bool = True
    #: only meaningful in process (e.g. `Reward.screen`, which nothing asks out of process)
    inprocess_only: bool = False
    doc: str = ""


@dataclass
class Context:
    spec: ComponentSpec
    config: dict[str, Any]
    workdir: Path
    runtime: str = "inprocess"

    def path(self, name: str) -> Path:
        return self.workdir / self.runtime / name


def _refusal(exc: BaseException) -> str | None:
    """The message of a clean refusal (the component raised a StatesetError, e.g. InputError), else None. Out of
    process the server reports such an error as INVALID_ARGUMENT, and anything else as INTERNAL."""
    if isinstance(exc, PluginError):
        return exc.message if exc.message.startswith("INVALID_ARGUMENT") else None
    return str(exc) if isinstance(exc, StatesetError) else None


def _answer_or_refusal(call: Callable[[], Any], what: str) -> tuple[str, Any]:
    """("answer", value) or ("refused", message); any other exception fails the check, naming the call."""
    try:
        return "answer", call()
    except Exception as exc:  # noqa: BLE001 - what it raised is what the check reports
        message = _refusal(exc)
        if message is None:
            raise CheckFailed(f"{what} raised {type(exc).__name__}: {exc} (refuse with a StatesetError, such as "
                              "InputError, naming the problem)") from None
        return "refused", message


# ------------------------------------------------------------------------------------------------------------- all


def _metadata(comp, ctx: Context) -> None:
    spec = ctx.spec
    got = (comp.kind, comp.name, comp.version)
    expect(got == (spec.kind, spec.name, spec.version),
           f"serves {got[0]}:{got[1]} {got[2]}, registered as {spec.full_name} {spec.version}")
    if ctx.runtime != "inprocess":
        from .contracts import CONTRACT_VERSIONS

        expect(set(comp.contract_versions) & set(CONTRACT_VERSIONS),
               f"speaks contract versions {list(comp.contract_versions)}, the kernel {list(CONTRACT_VERSIONS)}")


COMMON = [Check("metadata", _metadata, compare=False, doc="kind, name and version are the registration's")]


# --------------------------------------------------------------------------------------------------------- rewards


def _items() -> list[GradeItem]:
    return [GradeItem(c) for c in SAMPLE_CONVERSATIONS]


def _reward_rows(reward, ctx: Context) -> list[dict[str, Any]]:
    rows = reward.grade(_items())
    expected = [(c["id"], t) for c in SAMPLE_CONVERSATIONS for t in assistant_turns(c)]
    got = [(r.get("conversation_id"), r.get("turn_index")) for r in rows]
    expect(got == expected, f"graded turns {got}, expected one row per assistant turn, in order: {expected}")
    for row in rows:
        where = f"row {row['conversation_id']}#{row['turn_index']}"
        expect(set(row) == GRADE_ROW_KEYS, f"{where} has keys {sorted(row)}, expected {sorted(GRADE_ROW_KEYS)}")
        expect(isinstance(row["score"], float) and 0.0 <= row["score"] <= 1.0,
               f"{where}: score {row['score']!r} is not a float in [0, 1]")
        expect(isinstance(row["applicable"], bool), f"{where}: applicable {row['applicable']!r} is not a bool")
        expect(isinstance(row["breakdown"], dict), f"{where}: breakdown is not an object")
        expect(isinstance(row["reason"], str) and "\n" not in row["reason"],
               f"{where}: reason must be one line of text, got {row['reason']!r}")
        identity = row["reward"]
        expect(identity.get("name") == ctx.spec.name and identity.get("version") == ctx.spec.version,
               f"{where}: reward identity {identity!r} is not {ctx.spec.name} {ctx.spec.version}")
        expect(len(identity.get("config_sha256") or "") == 64, f"{where}: reward identity lacks a config sha256")
    return list(rows)


def _reward_grade_many(reward, ctx: Context) -> list[dict[str, Any]]:
    items = _items()
    rows = [row for batch in reward.grade_many([items[:1], items[1:]]) for row in batch]
    expect(rows == list(reward.grade(items)), "grade_many over two batches must give the rows grade gives")
    return rows


def _reward_turn_selection(reward, ctx: Context) -> list[dict[str, Any]]:
    conv = SAMPLE_CONVERSATIONS[-1]
    last = assistant_turns(conv)[-1]
    only = list(reward.grade([GradeItem(conv, turns=[last])]))
    expect([(r["conversation_id"], r["turn_index"]) for r in only] == [(conv["id"], last)],
           f"asked for turn {last} of {conv['id']} only, got {[(r['conversation_id'], r['turn_index']) for r in only]}")
    kind, _ = _answer_or_refusal(lambda: reward.grade([GradeItem(conv, turns=[0])]), "grading a user turn")
    expect(kind == "refused", "grading turn 0 (a user message) must be refused, not graded")
    return only


def _screenable_items() -> list[GradeItem]:
    import orjson

    bare = [{**c, "id": f"{c['id']}-bare", "metadata": {}, "tools": []} for c in SAMPLE_CONVERSATIONS]
    return [GradeItem(c, raw_json=orjson.dumps(c), assistant_turns=assistant_turns(c))
            for c in SAMPLE_CONVERSATIONS + bare]


def _reward_screen(reward, ctx: Context) -> None:
    items = _screenable_items()
    rows = reward.grade(items)
    for item in items:
        reason = reward.screen(item.raw_json)
        if reason is None:
            continue
        graded = [r for r in rows if r["conversation_id"] == item.conversation["id"]]
        expect(all(not r["applicable"] and r["reason"] == reason and r["breakdown"] == {} for r in graded),
               f"screen() says nothing of {item.conversation['id']} is applicable ({reason!r}), but grading it "
               "gives other rows")


def _reward_screened_bytes(reward, ctx: Context) -> bytes:
    items = _screenable_items()
    batches = list(reward.grade_many([items[:2], items[2:]], screened=True))
    written = b"".join(getattr(b, "jsonl", None) or b"".join(map(dumps_line, b)) for b in batches)
    expect(written == b"".join(map(dumps_line, reward.grade(items))),
           "grading with screening must write the bytes grading without it writes")
    return written


REWARD = [
    Check("reward.rows", _reward_rows, doc="one row per assistant turn, in order, in the documented shape"),
    Check("reward.grade_many", _reward_grade_many, doc="batched grading gives the rows grade gives"),
    Check("reward.turn_selection", _reward_turn_selection, doc="only the turns asked for; a user turn is refused"),
    Check("reward.screen", _reward_screen, compare=False, inprocess_only=True,
          doc="screen() answers only what grading would"),
    Check("reward.screened_bytes", _reward_screened_bytes, doc="screened grading writes the same bytes"),
]


# ------------------------------------------------------------------------------------------------------- ingestors


def _ingestor_rejects(ingestor, ctx: Context) -> list[dict[str, Any]]:
    ctx.path("").mkdir(parents=True, exist_ok=True)
    bad, empty = ctx.path("bad.jsonl"), ctx.path("empty.jsonl")
    bad.write_bytes(b"{not json\n")
    empty.write_bytes(b"")
    out = list(ingestor.ingest(Source(path="bad.jsonl", sha256=sha256_file(bad), local_path=str(bad))))
    expect(len(out) == 1 and isinstance(out[0], Reject), f"a line that is not JSON must give one Reject, got {out}")
    expect((out[0].path, out[0].line) == ("bad.jsonl", 1),
           f"the Reject must name the path as given and line 1, got {(out[0].path, out[0].line)}")
    nothing = list(ingestor.ingest(Source(path="empty.jsonl", sha256=sha256_file(empty), local_path=str(empty))))
    expect(nothing == [], f"an empty file must give nothing, got {nothing}")
    return [{"path": out[0].path, "line": out[0].line}]


INGESTOR = [Check("ingestor.rejects", _ingestor_rejects,
                  doc="a bad line is a Reject with its line number; an empty file gives nothing")]


# ----------------------------------------------------------------------------------------- trainers and evaluators


def _fails_closed(comp, ctx: Context) -> None:
    try:
        events = list(comp.run({"output_dir": str(ctx.path("out"))}))
    except StatesetError:
        return
    expect(events, "a stream must end with completed or failed; this one yielded nothing")
    expect(events[-1].get("type") == "failed", f"an incomplete request must end in failed, got {events[-1]}")
    expect(all(e.get("type") != "completed" for e in events), "an incomplete request must never complete")


STREAMING = [Check("fails_closed", _fails_closed, compare=False,
                   doc="an incomplete request ends in failed or a clear error, never in completed")]


# ------------------------------------------------------------------------------------------------------- providers


def _quote_request(**overrides: Any) -> dict[str, Any]:
    from .registry import get_registry

    algorithm = get_registry().default("trainer", "remote", face="train-remote")  # what train-remote would send
    return {"gpu": None, "gpus": 1, "max_hours": 1.0, "storage_gb": 20, "image": None, "base_model": None,
            "algorithm": algorithm, "training": {}, **overrides}


def _provider_quote(provider, ctx: Context) -> Any:
    kind, quote = _answer_or_refusal(lambda: provider.quote(_quote_request()), "quote")
    if kind == "refused":  # e.g. no credentials here, or no default GPU: a refusal, not a crash
        return kind
    expect(isinstance(quote, dict) and QUOTE_KEYS <= set(quote),
           f"a quote must hold {sorted(QUOTE_KEYS)}, got {sorted(quote) if isinstance(quote, dict) else quote!r}")
    expect(quote["provider"] == ctx.spec.name, f"quote names provider {quote['provider']!r}")
    expect(isinstance(quote["priced"], bool), "quote.priced must be true or false")
    if quote["priced"]:
        rate = quote["usd_per_gpu_hour"]
        expect(isinstance(rate, (int, float)) and rate >= 0, f"a priced quote needs usd_per_gpu_hour >= 0: {rate!r}")
    expect(isinstance(quote["image"], dict), "quote.image must be an object ({name, digest})")
    return {k: quote[k] for k in ("provider", "gpu", "priced", "usd_per_gpu_hour")}


def _provider_unknown_gpu(provider, ctx: Context) -> str:
    kind, _ = _answer_or_refusal(lambda: provider.quote(_quote_request(gpu="conformance-no-such-gpu")), "quote")
    expect(kind == "refused", "a quote for a GPU the provider does not offer must be refused (InputError)")
    return kind


def _provider_unknown_run(provider, ctx: Context) -> list[Any]:
    seen: list[Any] = []
    kind, status = _answer_or_refusal(lambda: provider.status(UNKNOWN_RUN), "status")
    if kind == "answer":
        expect(isinstance(status, dict) and status.get("state") == "missing",
               f"status of a run it never saw must say state 'missing', got {status!r}")
        status = status["state"]
    seen.append(status if kind == "answer" else kind)
    kind, receipt = _answer_or_refusal(lambda: provider.artifacts({"run_id": UNKNOWN_RUN}), "artifacts")
    if kind == "answer":
        expect(isinstance(receipt, dict) and receipt.get("state") != "succeeded" and not receipt.get("files"),
               f"a run it never saw has no artifacts, got {receipt!r}")
    seen.append(kind)
    kind, done = _answer_or_refusal(lambda: provider.terminate(UNKNOWN_RUN), "terminate")
    if kind == "answer":
        expect(isinstance(done, dict) and not done.get("terminated"),
               f"terminating a run it never saw must terminate nothing, got {done!r}")
    seen.append(kind)
    return seen


def _provider_list_jobs(provider, ctx: Context) -> None:
    kind, jobs = _answer_or_refusal(provider.list_jobs, "list_jobs")
    if kind == "refused":
        return
    expect(isinstance(jobs, list), f"list_jobs must return a list, got {type(jobs).__name__}")
    for job in jobs:
        expect(isinstance(job, dict) and job.get("run_id") and job.get("state") in JOB_STATES,
               f"each job needs a run_id and a state in {JOB_STATES}, got {job!r}")


_NOT_OFFERED = object()


def _provider_run_control(provider, ctx: Context) -> list[str]:
    """stop and logs of a run it never saw. Both are optional: a provider without them raises NotImplementedError
    (in process) or is a server that does not advertise them (out of process), and the kernel says so."""
    def offered(call):
        try:
            return call()
        except NotImplementedError:
            return _NOT_OFFERED

    seen = []
    kind, done = _answer_or_refusal(lambda: offered(lambda: provider.stop(UNKNOWN_RUN)), "stop")
    kind = "not offered" if done is _NOT_OFFERED else kind
    if kind == "answer":
        expect(isinstance(done, dict) and done.get("requested") is False,
               f"stopping a run it never saw must request nothing (requested: false), got {done!r}")
    seen.append(kind)
    kind, part = _answer_or_refusal(lambda: offered(lambda: provider.logs({"run_id": UNKNOWN_RUN, "offset": 0})),
                                    "logs")
    kind = "not offered" if part is _NOT_OFFERED else kind
    if kind == "answer":
        expect(isinstance(part, dict) and {"data_b64", "offset", "eof"} <= set(part) and not part["data_b64"],
               f"the logs of a run it never saw are empty ({{data_b64: '', offset, eof}}), got {part!r}")
    seen.append(kind)
    return seen


PROVIDER = [
    Check("provider.quote", _provider_quote, doc="a quote in the documented shape, or a clean refusal"),
    Check("provider.unknown_gpu", _provider_unknown_gpu, doc="a GPU it does not offer is refused"),
    Check("provider.unknown_run", _provider_unknown_run,
          doc="status, artifacts and terminate of a run it never saw: missing, none, nothing terminated"),
    Check("provider.list_jobs", _provider_list_jobs, compare=False, doc="every job has a run id and a state"),
    # compare=False: a server of an earlier revision has no Stop/Logs, while the same provider in process has them
    Check("provider.run_control", _provider_run_control, compare=False,
          doc="stop and logs of a run it never saw: nothing requested, no bytes (or not offered)"),
]

CHECKS: dict[str, list[Check]] = {"reward": REWARD, "ingestor": INGESTOR, "trainer": STREAMING,
                                  "evaluator": STREAMING, "provider": PROVIDER}


def checks_for(kind: str) -> list[Check]:
    return COMMON + CHECKS.get(kind, [])


# ---------------------------------------------------------------------------------------------------------- runner


@contextlib.contextmanager
def _sandbox() -> Iterator[Path]:
    """A scratch directory, and the kernel's state directory inside it: checking a provider never reads or writes
    the user's own runs. Out-of-process components started inside inherit it."""
    previous = os.environ.get(STATE_DIR_ENV)
    with tempfile.TemporaryDirectory(prefix="stateset-conformance-") as tmp:
        os.environ[STATE_DIR_ENV] = str(Path(tmp) / "state")
        try:
            yield Path(tmp)
        finally:
            if previous is None:
                os.environ.pop(STATE_DIR_ENV, None)
            else:
                os.environ[STATE_DIR_ENV] = previous


def _difference(seen: Any, want: Any) -> str:
    if isinstance(seen, list) and isinstance(want, list):
        if len(seen) != len(want):
            return f"{len(seen)} items, in process {len(want)}"
        for i, (a, b) in enumerate(zip(seen, want)):
            if a != b:
                return f"item {i}: {a!r}, in process {b!r}"
    return f"{seen!r:.300}, in process {want!r:.300}"


class _Runner:
    def __init__(self, spec: ComponentSpec, config: dict[str, Any], workdir: Path, reference: dict,
                 options: Mapping[str, Mapping[str, Any]]):
        self.spec, self.config, self.workdir, self.options = spec, config, workdir, options
        self.reference = reference
        self.key = (spec.full_name, spec.version, digest(config))
        self._local = None

    def load(self, runtime: str):
        from .runtimes import load_spec

        return load_spec(self.spec, config=self.config, runtime=runtime, **dict(self.options.get(runtime) or {}))

    def in_process_answer(self, check: Check) -> Any:
        """The in-process answer to `check`, computed once (and shared through `reference`)."""
        key = (*self.key, check.name)
        if key not in self.reference:
            if self._local is None:
                self._local = self.load("inprocess")
            try:
                self.reference[key] = ("answer", check.run(self._local, self.context("inprocess")))
            except Exception as exc:  # noqa: BLE001
                self.reference[key] = ("failed", f"{type(exc).__name__}: {exc}")
        return self.reference[key]

    def context(self, runtime: str) -> Context:
        return Context(self.spec, self.config, self.workdir, runtime)

    def close(self) -> None:
        if self._local is not None:
            self._local.close()

    def result(self, runtime: str, check: str, failure: str | None = None) -> Result:
        return Result(self.spec.full_name, runtime, check, failure is None, failure or "")

    def run(self, runtime: str) -> list[Result]:
        if not self.spec.available:
            return [self._unavailable(runtime)]
        try:
            comp = self.load(runtime)
        except Exception as exc:  # noqa: BLE001 - a component that cannot start fails every check
            return [self.result(runtime, "load", f"{type(exc).__name__}: {exc}")]
        results = []
        with comp:
            for check in checks_for(self.spec.kind):
                if check.inprocess_only and runtime != "inprocess":
                    continue
                results.append(self.result(runtime, check.name, self._one(comp, runtime, check)))
        return results

    def _one(self, comp, runtime: str, check: Check) -> str | None:
        try:
            seen = check.run(comp, self.context(runtime))
        except CheckFailed as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - a crash is a failure, reported with what raised
            return f"{type(exc).__name__}: {exc}"
        if not check.compare:
            return None
        if runtime == "inprocess":
            self.reference[(*self.key, check.name)] = ("answer", seen)
            return None
        status, want = self.in_process_answer(check)
        if status != "answer":
            return f"passed here, but failed in process ({want}), so there is nothing to compare with"
        return None if seen == want else f"answers differ from in-process: {_difference(seen, want)}"

    def _unavailable(self, runtime: str) -> Result:
        try:
            self.load(runtime).close()
        except ComponentUnavailable as exc:
            if not exc.install:
                return self.result(runtime, "unavailable", "it is unavailable, and gives no install command")
            return Result(self.spec.full_name, runtime, "unavailable", True, str(exc))
        except Exception as exc:  # noqa: BLE001
            return self.result(runtime, "unavailable", f"expected ComponentUnavailable, got {type(exc).__name__}: "
                                                       f"{exc}")
        return self.result(runtime, "unavailable", "it lists missing modules, yet it loaded")


def check_component(component: str | ComponentSpec, runtimes: Sequence[str] | None = None, *,
                    config: Mapping[str, Any] | None = None, reference: dict | None = None,
                    options: Mapping[str, Mapping[str, Any]] | None = None) -> list[Result]:
    """Run the suite against `component` (KIND:NAME, a unique NAME, or a spec) in each of `runtimes` (default:
    every runtime available for it here). `config` defaults to the class's `example_config()`. `reference` may be
    a dict shared between calls, so in-process answers are computed once; `options` maps a runtime to the options
    its launcher takes (e.g. {"subprocess": {"argv": [...]}})."""
    from .runtimes import RUNTIMES, available_runtimes

    spec = component if isinstance(component, ComponentSpec) else get_registry().resolve(component)
    chosen = tuple(runtimes or available_runtimes(spec))
    for runtime in chosen:
        if runtime not in RUNTIMES:
            raise InputError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}", field="runtime")
    if config is None:
        config = spec.load_class().example_config() if spec.available else {}
    results: list[Result] = []
    with _sandbox() as workdir:
        runner = _Runner(spec, dict(config), workdir, {} if reference is None else reference, options or {})
        try:
            for runtime in chosen:
                results.extend(runner.run(runtime))
        finally:
            runner.close()
    return results
