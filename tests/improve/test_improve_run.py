"""`improve run`: grading every assistant turn, curating, the summary, next steps, and what bad input gets."""
from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import orjson
import pytest

from stateset_agents.cli import main
from stateset_agents.core.jsonio import digest, sha256_file
from stateset_agents.plugin_api.datasets import decode_curated
from stateset_agents.plugin_api.overlap import find_overlaps
from tests.improve.improve_helpers import chat, write_transcripts

OUTPUTS = ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl", "improve_summary.json", "next_steps.md")


def rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def tool_conversation(cid: str = "tools-1") -> dict:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": {"order_id": "A1"}}}
    return {
        "id": cid,
        "messages": [
            {"role": "system", "content": "You help with orders."},
            {"role": "user", "content": [{"type": "text", "text": "Where is"}, {"type": "text", "text": "A1?"}]},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_order", "content": {"status": "shipped"}},
            {"role": "assistant", "content": "GOOD news: A1 has shipped."},
        ],
        "tools": [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}],
        "metadata": {"expected_tool_calls": [{"name": "get_order", "arguments": {"order_id": "A1"}}], "n": 3},
    }


def run_cli(*args: str) -> int:
    return main(["improve", "run", *args])


@pytest.fixture
def logs(tmp_path):
    conversations = [
        chat("c1", "hi", "GOOD answer", "and then?", "BAD answer"),
        chat("c2", "hello", "OKAY answer", "more", "EDGE answer"),
        tool_conversation(),
        chat("c3", "only a user turn"),
    ]
    write_transcripts(tmp_path / "in", conversations)
    return tmp_path / "in"


def test_grades_every_turn_and_curates_those_at_the_threshold(logs, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out),
                   "--held-out", "0") == 0

    graded = rows(out / "graded.jsonl")
    assert [(g["conversation_id"], g["turn_index"], g["score"]) for g in graded] == [
        ("c1", 2, 1.0), ("c1", 4, 0.1), ("c2", 2, 0.6), ("c2", 4, 0.7), ("tools-1", 2, 0.9), ("tools-1", 4, 1.0)]
    assert set(graded[0]) == {"conversation_id", "turn_index", "score", "applicable", "breakdown", "reason", "reward"}
    assert graded[0]["reward"]["name"] == "improve_toy" and graded[0]["reward"]["version"] == "1.2.0"
    assert graded[0]["reason"] == "keyword score 1.0"

    curated = rows(out / "curated.jsonl")
    assert [(r["lineage"]["conversation_id"], r["lineage"]["turn_index"], r["score"]) for r in curated] == [
        ("c1", 2, 1.0), ("c2", 4, 0.7), ("tools-1", 2, 0.9), ("tools-1", 4, 1.0)]  # 0.7 == threshold is kept
    first = curated[0]
    assert [m["content"] for m in first["prompt"]] == ["Be helpful.", "hi"]
    assert first["completion"] == [{"role": "assistant", "content": "GOOD answer", "tool_calls": None,
                                    "tool_call_id": None, "name": None}]
    assert first["lineage"] == {"conversation_id": "c1", "source_path": "logs/chat.jsonl", "source_sha256": "ab" * 32,
                                "line": 1, "turn_index": 2}
    assert len(curated[1]["prompt"]) == 4  # the prefix, never the turns after it

    summary = json.loads((out / "improve_summary.json").read_text())
    assert summary["counts"] == {
        "conversations": 4, "turns_graded": 6, "applicable": 6, "not_applicable": 0, "at_or_above_threshold": 4,
        "curated": 4, "curated_conversations": 3, "validation_conversations": 0, "validation_prompts": 0,
        "test_conversations": 0, "test_prompts": 0, "held_out_conversations": 0, "held_out_prompts": 0,
        "held_out_turns_withheld": 0}
    assert summary["schema_version"] == 2 and all(r["split"] == "train" for r in curated)
    assert summary["input"]["transcripts"]["sha256"] == sha256_file(logs / "transcripts.jsonl")
    assert summary["reward"] == {"name": "improve_toy", "version": "1.2.0", "config_sha256": digest({}),
                                 "component": "reward:improve_toy"}
    assert summary["threshold"] == 0.7
    scores = summary["scores"]
    assert scores["n"] == 6 and scores["mean"] == pytest.approx((1 + 0.1 + 0.6 + 0.7 + 0.9 + 1) / 6)
    assert scores["quantiles"]["p0"] == 0.1 and scores["quantiles"]["p50"] == 0.7 and scores["quantiles"]["p100"] == 1.0
    assert scores["histogram"]["counts"] == [0, 1, 0, 0, 0, 0, 1, 1, 0, 3]
    assert scores["checks"]["keyword"] == {"mean": pytest.approx(3.4 / 5), "n": 5}
    assert scores["checks"]["tool_call"] == {"mean": 1.0, "n": 1}
    for name in ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl"):
        assert summary["outputs"][name]["sha256"] == sha256_file(out / name)

    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == summary["train_command"]
    assert f"    {printed}" in (out / "next_steps.md").read_text()


def test_curated_messages_share_one_schema(logs, tmp_path):
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out), "--held-out", "0") == 0
    row = next(r for r in rows(out / "curated.jsonl") if r["lineage"]["turn_index"] == 4
               and r["lineage"]["conversation_id"] == "tools-1")
    user, call, result = row["prompt"][1:]
    assert user["content"] == "Where is\nA1?"  # content parts joined into text
    assert call["content"] == "" and call["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id":"A1"}'}}]
    assert result == {"role": "tool", "content": '{"status":"shipped"}', "tool_calls": None,
                      "tool_call_id": "call_1", "name": "get_order"}
    for message in row["prompt"] + row["completion"] + row["continuation"]:
        assert list(message) == ["role", "content", "tool_calls", "tool_call_id", "name"]
    # The recorded rest of the conversation rides along for multi-turn training to replay.
    first_turn = next(r for r in rows(out / "curated.jsonl") if r["lineage"]["conversation_id"] == "tools-1")
    assert first_turn["continuation"][-1] == row["completion"][0] or row["continuation"] == []
    # Free-form JSON travels as text, so every row has one Arrow type whatever the logs carried.
    decoded = decode_curated(row)
    assert decoded["tools"][0]["function"]["name"] == "get_order" and decoded["metadata"]["n"] == 3


def test_train_command_is_runnable_as_printed(logs, tmp_path, capsys):
    out = tmp_path / "out"
    policy = tmp_path / "policy.yaml"
    policy.write_text("min_words: 1\n")
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out),
                   "--policy", str(policy), "--base-model", "tiny/model") == 0
    command = capsys.readouterr().out.strip().splitlines()[-1]
    argv = shlex.split(command)
    assert argv[:2] == ["stateset-agents", "train"]
    flags = dict(zip(argv[2::2], argv[3::2]))
    expected = {"--dataset": str(out.resolve() / "curated.jsonl"), "--algorithm": "grpo", "--reward": "improve_toy",
                "--policy": str(policy.resolve()), "--base-model": "tiny/model", "--output": "runs/improve_toy"}
    summary = json.loads((out / "improve_summary.json").read_text())
    if summary["counts"]["validation_prompts"]:
        expected["--eval-prompts"] = str(out.resolve() / "validation.jsonl")
    assert flags == expected


def test_printed_commands_name_only_files_that_exist_and_parse_offline(tmp_path, capsys, monkeypatch):
    """No --base-model named: the command names none (train's offline default), never a hub id; the split files it
    names exist; and train's own argument parsing accepts it as printed."""
    convs = [chat(f"c{i}", f"question {i} about my order", "GOOD reply") for i in range(40)]
    write_transcripts(tmp_path / "in", convs)
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(tmp_path / "in"), "--reward", "improve_toy", "--output", str(out),
                   "--held-out", "0.2") == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    next_steps = (out / "next_steps.md").read_text()
    assert f"    {printed}" in next_steps
    assert "HuggingFaceTB" not in printed + next_steps and "HELD_OUT_PROMPTS" not in printed + next_steps
    argv = shlex.split(printed)
    assert "--base-model" not in argv and argv[argv.index("--eval-prompts") + 1] == str(out.resolve() /
                                                                                       "validation.jsonl")
    for token in argv + shlex.split(next_steps.split("## Test, once")[1].split("## Look first")[0]
                                    .replace("STEP", "3")):
        if token.endswith(".jsonl"):
            assert Path(token).is_file(), token

    # Parse the printed command with train's own parser; stop where training would start.
    import stateset_agents.core.runtimes as runtimes

    seen = {}

    class Stop(Exception):
        pass

    def fake_load(name, **kwargs):
        seen["component"] = name
        raise Stop()

    monkeypatch.setattr(runtimes, "load_component", fake_load)
    with pytest.raises(Stop):
        main(argv[1:])
    assert seen["component"] == "trainer:grpo"
    # the test-look commands parse too: they stop at "nothing nominated yet", not at a usage error
    test_block = next_steps.split("## Test, once")[1].split("## Look first")[0]
    printed_evaluate = next(line.strip() for line in test_block.splitlines() if "evaluate --run" in line)
    capsys.readouterr()
    assert main(shlex.split(printed_evaluate)[1:]) == 2
    assert "no checkpoint is nominated" in capsys.readouterr().err.replace("\n", " ")


def test_three_roles_split_by_group_never_by_row(tmp_path):
    """Conversations of one task id land on one side whatever their openings; each split row records its role and
    group; no group is on two sides; the validation slice of conversations without ids matches the old held-out
    hash (so a rerun on the same logs keeps its validation set)."""
    convs = []
    for task in range(30):
        for trial in range(3):
            c = chat(f"t{task}-{trial}", f"trial {trial} of task {task}: different words {trial * 7 + task}",
                     "GOOD reply")
            c["metadata"] = {"task_id": task}
            convs.append(c)
    convs += [chat(f"free{i}", f"a question without a task {i}", "GOOD reply") for i in range(30)]
    write_transcripts(tmp_path / "in", convs)
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(tmp_path / "in"), "--reward", "improve_toy", "--output", str(out),
                   "--held-out", "0.2") == 0
    validation, test = rows(out / "validation.jsonl"), rows(out / "test.jsonl")
    curated = rows(out / "curated.jsonl")
    assert validation and test
    assert {r["split"] for r in validation} == {"validation"} and {r["split"] for r in test} == {"test"}
    side = {}
    for role, items in (("validation", validation), ("test", test)):
        for r in items:
            side.setdefault(r["group"], set()).add(role)
    for r in curated:
        meta = decode_curated(r)["metadata"]
        if "task_id" in meta:
            side.setdefault(f"task_id={meta['task_id']}", set()).add("train")
    assert all(len(roles) == 1 for roles in side.values()), {g: r for g, r in side.items() if len(r) > 1}
    task_groups = [g for g in side if g.startswith("task_id=")]
    assert len(task_groups) == 30  # every task somewhere, each whole
    by_task = {}
    for r in validation + test:
        if r["group"].startswith("task_id="):
            by_task.setdefault(r["group"], 0)
            by_task[r["group"]] += 1
    assert set(by_task.values()) == {3}  # all three trials of a held-out task are held out together
    summary = json.loads((out / "improve_summary.json").read_text())
    for role, name in (("validation", "validation.jsonl"), ("test", "test.jsonl")):
        assert summary["splits"][role]["sha256"] == sha256_file(out / name)
        assert summary["splits"][role]["prompts"] == len(rows(out / name))
    from stateset_agents.pipeline.curated_rows import is_held_out

    free_held = {r["lineage"]["conversation_id"] for r in validation if r["group"].startswith("opening:")}
    assert free_held == {c["id"] for c in convs if c["id"].startswith("free") and is_held_out(c["messages"], 0.2)}


def test_split_files_are_refused_by_the_training_loader(tmp_path):
    from stateset_agents.core.errors import InputError
    from stateset_agents.plugin_api.datasets import load_dataset

    convs = [chat(f"c{i}", f"question {i} about my order", "GOOD reply") for i in range(40)]
    write_transcripts(tmp_path / "in", convs)
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(tmp_path / "in"), "--reward", "improve_toy", "--output", str(out),
                   "--held-out", "0.2") == 0
    assert len(load_dataset(out / "curated.jsonl").rows) > 0
    for name, role in (("validation.jsonl", "validation"), ("test.jsonl", "test")):
        with pytest.raises(InputError, match=f"this is a {role} file") as err:
            load_dataset(out / name)
        assert f"{name}:1:" in str(err.value)
        # a split row smuggled into a training file is refused by line, whatever the file is called
        mixed = tmp_path / f"mixed-{role}.jsonl"
        row = rows(out / name)[0]
        row["completion"] = {"role": "assistant", "content": "x"}
        mixed.write_bytes((out / "curated.jsonl").read_bytes() + orjson.dumps(row) + b"\n")
        with pytest.raises(InputError, match=f"this is a {role} file") as err:
            load_dataset(mixed)
        assert f":{len(rows(out / 'curated.jsonl')) + 1}:" in str(err.value)
    legacy = tmp_path / "held_out.jsonl"
    legacy.write_bytes(b'{"id": "a#1", "prompt": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(InputError, match="held-out evaluation file"):
        load_dataset(legacy)


@pytest.mark.parametrize("suffix, text", [(".yaml", "min_words: 3\nnote: yaml\n"),
                                          (".json", '{"min_words": 3, "note": "json"}')])
def test_policy_file_travels_as_reward_config(logs, tmp_path, suffix, text):
    policy = tmp_path / f"policy{suffix}"
    policy.write_text(text)
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out),
                   "--policy", str(policy), "--held-out", "0") == 0
    summary = json.loads((out / "improve_summary.json").read_text())
    content = json.loads(text) if suffix == ".json" else {"min_words": 3, "note": "yaml"}
    assert summary["reward"]["config_sha256"] == digest({"policy": content})
    assert summary["policy"] == {"path": str(policy.resolve()), "sha256": sha256_file(policy)}
    graded = rows(out / "graded.jsonl")
    assert [g["applicable"] for g in graded if g["conversation_id"] == "c1"] == [False, False]  # two words < 3
    assert summary["counts"]["not_applicable"] == 4


def test_batches_bound_each_grading_call_and_do_not_change_results(tmp_path):
    from tests.improve.improve_toy_reward import ToyReward

    convs = [chat(f"c{i}", f"hi {i}", "GOOD" if i % 2 else "BAD") for i in range(7)]
    logs = tmp_path / "in"
    write_transcripts(logs, convs)
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(tmp_path / "a"),
                   "--batch-size", "2") == 0
    assert ToyReward.batch_sizes == [2, 2, 2, 1]
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(tmp_path / "b")) == 0
    for name in ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_held_out_slice_is_deterministic_and_never_trained_on(tmp_path):
    openings = [f"Question number {i} about my order" for i in range(60)]
    # Conversations that open the same way (case and spacing aside) must land on the same side.
    convs = [chat(f"a{i}", text, "GOOD reply") for i, text in enumerate(openings)]
    convs += [chat(f"b{i}", "  " + text.upper().replace(" ", ",  ") + "?! ", "GOOD again")
              for i, text in enumerate(openings)]
    logs = tmp_path / "in"
    write_transcripts(logs, convs)
    for out in ("o1", "o2"):
        assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(tmp_path / out),
                       "--held-out", "0.2") == 0
    for name in ("validation.jsonl", "test.jsonl"):
        assert (tmp_path / "o1" / name).read_bytes() == (tmp_path / "o2" / name).read_bytes()

    held = rows(tmp_path / "o1" / "validation.jsonl") + rows(tmp_path / "o1" / "test.jsonl")
    curated = rows(tmp_path / "o1" / "curated.jsonl")
    summary = json.loads((tmp_path / "o1" / "improve_summary.json").read_text())
    held_ids = {h["lineage"]["conversation_id"] for h in held}
    assert 0 < len(held) < len(convs) and summary["counts"]["held_out_prompts"] == len(held)
    assert {cid[1:] for cid in held_ids if cid.startswith("a")} == {cid[1:] for cid in held_ids if cid.startswith("b")}
    assert not held_ids & {r["lineage"]["conversation_id"] for r in curated}
    assert summary["counts"]["curated"] + summary["counts"]["held_out_turns_withheld"] == len(convs)

    # The check `train` runs before training finds nothing to refuse.
    assert find_overlaps(curated, held) == []
    assert find_overlaps([{"prompt": held[0]["prompt"]}], held)  # and it would find one
    assert held[0]["prompt"][-1]["role"] == "user" and held[0]["metadata"] == {}


def test_held_out_prompts_start_after_a_user_message(tmp_path):
    greeting = [{"role": "system", "content": "Be kind."},
                {"role": "assistant", "content": "GOOD day, how can I help?"}]
    convs = [{"id": f"g{i}", "messages": greeting + [{"role": "user", "content": f"question {i}"},
                                                     {"role": "assistant", "content": "GOOD answer"}]}
             for i in range(20)]
    write_transcripts(tmp_path / "in", convs)
    assert run_cli("--transcripts", str(tmp_path / "in"), "--reward", "improve_toy", "--output", str(tmp_path / "o"),
                   "--held-out", "0.4") == 0
    held = rows(tmp_path / "o" / "validation.jsonl") + rows(tmp_path / "o" / "test.jsonl")
    assert held and all(h["lineage"]["turn_index"] == 3 for h in held)
    # A bare greeting prompt would collide with every other conversation's: none is held out or clashes.
    assert find_overlaps(rows(tmp_path / "o" / "curated.jsonl"), held) == []


def test_nothing_curated_explains_what_to_do(tmp_path, capsys):
    logs = tmp_path / "in"
    write_transcripts(logs, [chat("c1", "hi", "BAD"), chat("c2", "yo", "BAD")])
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(tmp_path / "out")) == 0
    assert (tmp_path / "out" / "curated.jsonl").read_bytes() == b""
    assert "No turn reached the threshold" in (tmp_path / "out" / "next_steps.md").read_text()
    assert "no turn reached the threshold" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (b"", "no conversations in this file"),
    (b'{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n', "no assistant turns to grade"),
    (b'{"id": "a", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}\n'
     b"\n{not json\n", "transcripts.jsonl:3: invalid JSON"),
    (b'{"id": "a", "messages": []}\n', "transcripts.jsonl:1: expected a non-empty list of messages (field 'messages')"),
    (b'[1, 2]\n', "transcripts.jsonl:1: expected a JSON object"),
    (b'{"messages": [{"role": "user"}]}\n', "transcripts.jsonl:1: missing or invalid conversation id (field 'id')"),
    (b'{"id": 1, "messages": [{"role": "user"}, {"content": "no role"}]}\n',
     "transcripts.jsonl:1: expected a message object with a string role (field 'messages[1].role')"),
    (b'{"id": 1, "messages": [{"role": "user"}], "metadata": [1]}\n', "(field 'metadata')"),
])
def test_bad_input_names_file_line_and_field_and_keeps_old_outputs(logs, tmp_path, capsys, content, message):
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out)) == 0
    before = {name: (out / name).read_bytes() for name in OUTPUTS}
    (logs / "transcripts.jsonl").write_bytes(content)
    capsys.readouterr()
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out)) == 2
    assert message in capsys.readouterr().err.replace("\n", "")
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == before
    assert sorted(os.listdir(out)) == sorted(OUTPUTS)  # no temp file left behind


def test_missing_inputs_are_named(tmp_path, capsys):
    assert run_cli("--transcripts", str(tmp_path / "nope"), "--reward", "improve_toy", "--output",
                   str(tmp_path / "out")) == 2
    assert f"{tmp_path / 'nope'}: file not found" in capsys.readouterr().err.replace("\n", "")
    write_transcripts(tmp_path / "in", [chat("c1", "hi", "GOOD")])
    assert run_cli("--transcripts", str(tmp_path / "in"), "--reward", "improve_toy", "--output",
                   str(tmp_path / "out"), "--policy", str(tmp_path / "policy.yaml")) == 2
    assert "policy.yaml: policy file not found" in capsys.readouterr().err.replace("\n", "")
    assert run_cli("--transcripts", str(tmp_path / "in"), "--reward", "no_such_reward", "--output",
                   str(tmp_path / "out")) == 2
    assert "unknown reward 'no_such_reward'" in capsys.readouterr().err.replace("\n", "")


def test_a_reward_failing_midway_leaves_the_previous_outputs(logs, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out)) == 0
    before = {name: (out / name).read_bytes() for name in OUTPUTS}
    convs = [chat(f"c{i}", "hi", "GOOD") for i in range(5)] + [chat("boom", "hi", "EXPLODE")]
    write_transcripts(logs, convs)
    # the CLI's one clear line, naming the reward and the call (tests/faults/test_reward_faults.py: every runtime)
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out), "--batch-size",
                   "2") == 1
    assert "reward:improve_toy failed in grade: RuntimeError: asked to explode" in capsys.readouterr().err
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == before
    assert sorted(os.listdir(out)) == sorted(OUTPUTS)


def test_a_reward_that_breaks_the_contract_is_refused(logs, tmp_path, capsys):
    assert run_cli("--transcripts", str(logs), "--reward", "improve_dropping", "--output", str(tmp_path / "o")) == 1
    err = capsys.readouterr().err.replace("\n", "")
    assert re.search(r"reward:improve_dropping failed in grade: returned \d+ grades for \d+ assistant turns", err)
    assert not (tmp_path / "o" / "improve_summary.json").exists()


def test_out_of_range_options_are_refused(logs, tmp_path, capsys):
    assert run_cli("--transcripts", str(logs), "--reward", "improve_toy", "--output", str(tmp_path / "o"),
                   "--threshold", "1.5") == 2
    assert "threshold must lie in [0, 1]" in capsys.readouterr().err


def test_a_log_that_declares_itself_held_out_is_refused(tmp_path, capsys):
    """Ingested validation/test logs (metadata.split, as ingest keeps a row's role) never become curated rows:
    the run refuses, naming the file, line and field, and writes nothing."""
    convs = [chat("a", "what is my order status", "GOOD reply"),
             chat("b", "cancel my order", "GOOD reply", metadata={"split": "test"})]
    write_transcripts(tmp_path / "in", convs)
    out = tmp_path / "out"
    assert run_cli("--transcripts", str(tmp_path / "in"), "--reward", "improve_toy", "--output", str(out)) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "transcripts.jsonl:2:" in err and "metadata.split" in err and "'test'" in err, err
    assert not (out / "curated.jsonl").exists()
    convs[1]["metadata"] = {"split": "train"}  # a train role is what improve expects
    write_transcripts(tmp_path / "in", convs)
    assert run_cli("--transcripts", str(tmp_path / "in"), "--reward", "improve_toy", "--output", str(out)) == 0
