"""Coverage-guided fuzzing (atheris/libFuzzer) of the ingest line parser and the policy-language parser.

    python benchmarks/fuzz.py --minutes N [--target ingest|policy|all] [--output benchmarks/results/fuzz.json]

Targets, each run for N minutes in a child process with the product's code instrumented for coverage:

* `ingest`: the input is a log file (one or more lines); the first byte picks the format (openai, anthropic) and
  redaction. The lines go through the ingestor's reading loop (parsing, message checks, call-log stitching) and the
  kernel's accounting and writing (duplicates, ids, redaction, the JSONL outputs, in memory), and the outputs are
  checked: every row is JSON, and every non-blank line is written, a duplicate or a reject.
* `policy`: the input is a policy file (YAML); it is loaded as `--policy` loads it and, when it loads, grades real
  conversations with the `nsr` reward.

The product's own errors (InputError and the other StatesetErrors: a clear message, no traceback) are expected; any
other exception, a failed check, a hang (-timeout) or a memory blow-up (-rss_limit_mb) is a crash. Each distinct
crash (exception type and where it was raised) is saved under benchmarks/results/fuzz-crashes/ and fuzzing goes on.
Seeds: the tau-airline logs (../shared/data) as conversations and call logs in both formats, the sample support
logs, and every policy file the project ships. Results: benchmarks/results/fuzz.json.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SHARED = ROOT.parent / "shared" / "data"
TARGETS = ("ingest", "policy")
MAX_LEN = 16384  # bytes of one input: enough for a few real lines or a whole policy file
# JSON keys and values the formats care about: libFuzzer splices them in, which byte flips rarely find.
DICTIONARY = ('"role"', '"content"', '"tool_calls"', '"tool_call_id"', '"name"', '"messages"', '"tools"', '"id"',
              '"metadata"', '"request"', '"response"', '"choices"', '"message"', '"function"', '"arguments"',
              '"type"', '"text"', '"tool_use"', '"tool_result"', '"tool_use_id"', '"input"', '"system"',
              '"assistant"', '"user"', '"tool"', '"error"', '"conversation_id"', '"input_schema"', 'null', '[[[[',
              '{"a":', '"\\u0000"', '1e308', 'rules:', 'require:', 'when:', 'decision:', 'facts:', 'words:', 'id:',
              'if_unknown:', 'weight:', 'constants:', 'scoring:', 'tools:', "args.", "result('", "flatten(",
              "leaves(", " for x in ", " if ", " and ", " or ", " not ", "-", " * ", "[0]")


# ------------------------------------------------------------------------------------------------------- seeds


def _call_logs(record: dict) -> list[dict]:
    """OpenAI call logs of a conversation: one line per assistant turn, the messages before it as the request."""
    messages, out = record["messages"], []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            out.append({"conversation_id": record.get("id"), "request": {"model": "m", "messages": messages[:i]},
                        "response": {"choices": [{"index": 0, "message": m, "finish_reason": "stop"}]}})
    return out


def _anthropic(record: dict) -> dict:
    system, out = None, []
    for m in record["messages"]:
        if m["role"] == "system":
            system = m["content"]
        elif m["role"] == "tool":
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m["tool_call_id"],
                                                     "content": m["content"]}]})
        elif m["role"] == "assistant":
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"] or "{}")} for c in m.get("tool_calls") or ()]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": "user", "content": m["content"]})
    return {"id": record.get("id"), "system": system, "messages": out}


def _records() -> list[dict]:
    """Real conversations, cut short so a seed stays under MAX_LEN: the sample support logs and tau-airline's."""
    records = [json.loads(line) for line in
               (ROOT / "kernel/stateset_agents/samples/support_logs.jsonl").read_text().splitlines()[:20]]
    for t in json.loads((SHARED / "tau-airline" / "trajectories.dev.json").read_text())[:10]:
        records.append({"id": f"tau-{t['task_id']}-{t['trial']}", "messages": t["traj"][1:8]})  # no system prompt
    return records


def ingest_seeds() -> list[bytes]:
    seeds = []
    for record in _records():
        conv = {k: record[k] for k in ("id", "messages") if k in record}
        seeds.append(b"\x00" + json.dumps(conv).encode())
        seeds.append(b"\x00" + "\n".join(json.dumps(c) for c in _call_logs(conv)[:3]).encode())
        seeds.append(b"\x01" + json.dumps(_anthropic(conv)).encode())
    return [s for s in seeds if len(s) <= MAX_LEN]


def policy_files() -> list[Path]:
    return sorted([*(ROOT / "plugins/stateset_plugins/rewards/policies").glob("*.yaml"),
                   *(ROOT / "plugins/stateset_plugins/recipes/policies").glob("*.yaml"),
                   ROOT / "kernel/stateset_agents/samples/support_policy.yaml"])


# ------------------------------------------------------------------------------------------------ the targets


def _ingest_target():
    """The one-input function for `ingest`, its code imported under instrumentation."""
    import atheris

    with atheris.instrument_imports(include=["stateset_plugins.ingestors", "stateset_agents.pipeline.ingest",
                                             "stateset_agents.pipeline.redact", "stateset_agents.core.jsonio"]):
        from stateset_agents.core.components import Reject, Source
        from stateset_agents.pipeline.ingest import DigestSet, _Ingest, _Output, _Tally
        from stateset_plugins.ingestors.anthropic import AnthropicIngestor
        from stateset_plugins.ingestors.openai import OpenAIIngestor
    import orjson

    ingestors = (OpenAIIngestor({}), AnthropicIngestor({}), OpenAIIngestor({"stitch_window": 2}))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # a file write a run: keep it off the disk
    path = Path(tempfile.mkdtemp(prefix="fuzz-ingest-", dir=shm)) / "log.jsonl"

    def one(data: bytes) -> None:
        if not data:
            return
        body = data[1:]
        path.write_bytes(body)
        ingestor, redact = ingestors[data[0] % 3], bool(data[0] & 4)
        source = Source(path="log.jsonl", sha256=hashlib.sha256(body).hexdigest(), local_path=str(path))
        run = _Ingest(_Output(io.BytesIO(), "t"), _Output(io.BytesIO(), "r"), redact,
                      seen_content=DigestSet(8), seen_ids=DigestSet(8))  # small tables: they grow as needed
        tally = _Tally()
        for item in ingestor.ingest(source):
            if isinstance(item, Reject):
                run.rejected_line(item, tally)
            else:
                run.conversation(item, source, tally, "ingestor:fuzz")
        # The checks `ingest` promises: JSON rows, and every non-blank line accounted for exactly once.
        lines = {n for n, raw in enumerate(body.split(b"\n"), 1) if raw and not raw.isspace()}
        rows = [orjson.loads(r) for r in run.transcripts.file.getvalue().splitlines()]
        rejects = [orjson.loads(r) for r in run.rejects.file.getvalue().splitlines()]
        written = [n for r in rows for n in (r["source"].get("lines") or [r["source"]["line"]])]
        rejected = [r["line"] for r in rejects]
        assert tally.read == len(lines), (tally.read, len(lines))
        assert len(set(written) | set(rejected)) == len(written) + len(rejected), "a line counted twice"
        assert set(written) | set(rejected) <= lines, "a line that is not in the input"
        assert tally.duplicates or set(written) | set(rejected) == lines, "a line lost"
        assert all(r["reason"] and r["path"] == "log.jsonl" for r in rejects)

    return one


def _policy_target():
    import atheris

    with atheris.instrument_imports(include=["stateset_plugins.rewards.policy_language",
                                             "stateset_plugins.rewards.policy_loading",
                                             "stateset_plugins.rewards.nsr"]):
        from stateset_plugins.rewards.nsr import NSRReward
    from stateset_agents.pipeline.improve import load_policy

    conversations = [{"id": r.get("id") or "c", "messages": r["messages"], "tools": r.get("tools") or []}
                     for r in _records()[::10]]
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    path = Path(tempfile.mkdtemp(prefix="fuzz-policy-", dir=shm)) / "policy.yaml"

    def one(data: bytes) -> None:
        path.write_bytes(data)
        reward = NSRReward({"policy": load_policy(path)})
        for conv in conversations:
            turns = [i for i, m in enumerate(conv["messages"]) if m.get("role") == "assistant"]
            reward.grade_conversation(conv, turns)

    return one


def child(target: str, stats_path: Path, crash_dir: Path, argv: list[str]) -> None:
    """Run one target under libFuzzer; record executions and each distinct crash (and go on fuzzing)."""
    import atheris

    from stateset_agents.core.errors import StatesetError

    one = (_ingest_target if target == "ingest" else _policy_target)()
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {"executions": 0, "crashes": []}
    seen = {c["signature"] for c in stats["crashes"]}
    last_write = [time.monotonic()]

    def save() -> None:
        stats_path.write_text(json.dumps(stats, indent=2))
        last_write[0] = time.monotonic()

    def test_one(data: bytes) -> None:
        stats["executions"] += 1
        try:
            one(data)
        except StatesetError:
            pass  # the product's own clear error
        except Exception as exc:  # noqa: BLE001 - anything else is what we are looking for
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/benchmarks/" not in f.filename]
            where = f"{frames[-1].filename.split('/')[-1]}:{frames[-1].lineno}" if frames else "?"
            signature = f"{type(exc).__name__} at {where}"
            if signature not in seen:
                seen.add(signature)
                name = f"{target}-{hashlib.sha256(data).hexdigest()[:16]}"
                (crash_dir / name).write_bytes(data)
                stats["crashes"].append({"signature": signature, "message": str(exc)[:300], "input": name,
                                         "traceback": traceback.format_exc(limit=-4)[-2000:]})
                save()
        if time.monotonic() - last_write[0] > 2:
            save()

    atheris.Setup([sys.argv[0], *argv], test_one)
    atheris.Fuzz()


# ------------------------------------------------------------------------------------------------- the parent


def fuzz(target: str, minutes: float, work: Path, crash_dir: Path) -> dict:
    corpus = work / f"corpus-{target}"
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = ingest_seeds() if target == "ingest" else [p.read_bytes() for p in policy_files()]
    for seed in seeds:
        (corpus / hashlib.sha256(seed).hexdigest()[:16]).write_bytes(seed)
    dictionary = work / "tokens.dict"
    dictionary.write_text("".join(f"{json.dumps(t)}\n" for t in DICTIONARY))
    stats_path, artifacts = work / f"stats-{target}.json", work / f"artifacts-{target}"
    artifacts.mkdir(exist_ok=True)
    deadline = time.monotonic() + minutes * 60
    runs = hangs = 0
    while (left := deadline - time.monotonic()) > 5:
        runs += 1
        flags = [f"-max_total_time={int(left)}", f"-max_len={MAX_LEN}", "-timeout=10", "-rss_limit_mb=3072",
                 f"-dict={dictionary}", f"-artifact_prefix={artifacts}/", "-print_final_stats=1", str(corpus)]
        done = subprocess.run([sys.executable, __file__, "--child", target, "--stats", str(stats_path),
                               "--crash-dir", str(crash_dir), "--", *flags], capture_output=True, text=True)
        for artifact in sorted(artifacts.iterdir()):  # a hang or a memory blow-up: libFuzzer stopped the child
            kind = artifact.name.split("-")[0]
            data = artifact.read_bytes()
            name = f"{target}-{kind}-{hashlib.sha256(data).hexdigest()[:16]}"
            (crash_dir / name).write_bytes(data)
            stats = json.loads(stats_path.read_text())
            stats["crashes"].append({"signature": kind, "message": done.stderr[-500:], "input": name})
            stats_path.write_text(json.dumps(stats, indent=2))
            artifact.unlink()
            hangs += 1
        if done.returncode != 0 and not hangs and "stat::number_of_executed_units" not in done.stderr:
            raise SystemExit(f"the {target} fuzzer failed to run:\n{done.stderr[-3000:]}")
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {"executions": 0, "crashes": []}
    return {"executions": stats["executions"], "minutes": minutes, "seeds": len(seeds), "child_runs": runs,
            "corpus_after": len(list(corpus.iterdir())), "crashes": stats["crashes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0, help="fuzzing time per target")
    parser.add_argument("--target", choices=(*TARGETS, "all"), default="all")
    parser.add_argument("--output", type=Path, default=RESULTS / "fuzz.json")
    parser.add_argument("--crash-dir", type=Path, default=RESULTS / "fuzz-crashes")
    parser.add_argument("--child", choices=TARGETS, help=argparse.SUPPRESS)
    parser.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    args.crash_dir.mkdir(parents=True, exist_ok=True)
    if args.child:
        child(args.child, args.stats, args.crash_dir, [a for a in rest if a != "--"])
        return
    targets = TARGETS if args.target == "all" else (args.target,)
    with tempfile.TemporaryDirectory(prefix="fuzz-") as work:
        results = {t: fuzz(t, args.minutes, Path(work), args.crash_dir) for t in targets}
    previous = json.loads(args.output.read_text()) if args.output.exists() else {}
    report = {"tool": "atheris", "python": platform.python_version(), "machine": platform.machine(),
              "cpus": os.cpu_count(), "targets": {**previous.get("targets", {}), **results}}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    for name, r in results.items():
        print(f"{name}: {r['executions']} executions in {r['minutes']} min, {len(r['crashes'])} distinct crashes")
        for crash in r["crashes"]:
            print(f"  {crash['signature']}: {crash['message'][:120]} ({crash['input']})")


if __name__ == "__main__":
    main()
