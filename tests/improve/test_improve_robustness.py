"""`improve audit --robustness`: each breakage generator breaks what it says and nothing else (seeded, the original
untouched, None where it does not apply), and the audit tallies win rates the way docs/improve.md defines them."""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

import pytest

from stateset_agents import Reward, TurnGrade
from stateset_agents.cli import main
from stateset_agents.core.errors import InputError
from stateset_agents.pipeline import breakages
from stateset_agents.pipeline.breakages import KINDS, ReplyPool
from stateset_agents.plugin_api.text import message_text
from stateset_agents.pipeline.robustness import break_conversation, parse_kinds, robustness_report
from tests.improve.improve_helpers import chat, write_transcripts


def declare(name, **properties):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object",
                                                                          "properties": properties}}}


STRING = {"type": "string"}
TOOLS = [declare("get_order", order_id=STRING),
         declare("cancel_order", order_id=STRING, reason={"type": "string", "enum": ["no longer needed", "mistake"]}),
         declare("update_address", order_id=STRING, address=STRING),
         declare("transfer_to_human", summary=STRING)]


def user(text):
    return {"role": "user", "content": text}


def reply(text):
    return {"role": "assistant", "content": text}


def call(call_id, name, arguments):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def result(call_id, name, content):
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def shop(cid="shop-1"):
    """A lookup, a confirmed cancellation that took effect, and three replies."""
    return {"id": cid, "messages": [
        {"role": "system", "content": "You help customers with their orders."},
        user("Hi, I want to cancel order W4821 please."),
        call("c1", "get_order", {"order_id": "W4821"}),
        result("c1", "get_order", '{"order_id": "W4821", "status": "pending", "total": 129.50}'),
        reply("Order W4821 is pending and its total is $129.50. Shall I cancel it?"),
        user("Yes, go ahead."),
        call("c2", "cancel_order", {"order_id": "W4821", "reason": "no longer needed"}),
        result("c2", "cancel_order", '{"order_id": "W4821", "status": "cancelled"}'),
        reply("Your order W4821 has been cancelled. The refund will reach you within 5 days."),
        user("Thanks!"),
        reply("You're welcome, have a nice day."),
    ], "tools": copy.deepcopy(TOOLS), "metadata": {}}


def lookup_only(cid="look-1"):
    """A lookup and an answer: no write anywhere."""
    return {"id": cid, "messages": [
        user("Where is my order B7730? My card ends in 4421."),
        call("c1", "get_order", {"order_id": "B7730"}),
        result("c1", "get_order", '{"order_id": "B7730", "status": "shipped"}'),
        reply("Your order B7730 has shipped. You can pay the balance:\n1. with the card ending 4421\n2. by transfer"),
    ], "tools": copy.deepcopy(TOOLS), "metadata": {}}


def weather(cid="other-1"):
    return {"id": cid, "messages": [
        user("Will it rain in the mountains tomorrow?"),
        reply("Expect heavy rain across the northern mountains by late afternoon tomorrow."),
        user("And the weekend?"),
        reply("Sunny spells return on Saturday, with gentle breezes along the coastal paths."),
    ], "tools": [], "metadata": {}}


def messages_other_than(conv, indices):
    return [m for i, m in enumerate(conv["messages"]) if i not in indices]


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_seeded_leaves_the_original_untouched_and_reports_what_it_broke(kind):
    conv = shop()
    before = copy.deepcopy(conv)
    pool = ReplyPool([conv, weather()])
    first = break_conversation(conv, kind, seed=3, pool=pool)
    again = break_conversation(conv, kind, seed=3, pool=pool)
    assert first is not None and first.kind == kind
    assert (first.conversation, first.turns, first.notes) == (again.conversation, again.turns, again.notes)
    assert conv == before
    assert first.conversation != conv
    for turn in first.turns:
        original = conv["messages"][turn["original_index"]]
        broken = first.conversation["messages"][turn["index"]]
        if isinstance(turn["original"], str):
            assert (message_text(original), message_text(broken)) == (turn["original"], turn["broken"])
            assert (turn["original"] == turn["broken"]) == (kind == "skipped_lookup")  # its reply stays, unbacked
        else:
            assert turn["original"]["name"] == original["tool_calls"][0]["function"]["name"]
            assert turn["broken"]["name"] == broken["tool_calls"][0]["function"]["name"]
    if first.notes.get("variant") != "write_removed" and kind not in ("repeated_call", "skipped_lookup"):
        # (those remove or add messages)
        broken_at = {t["index"] for t in first.turns}
        assert len(first.conversation["messages"]) == len(conv["messages"])
        results = [i + 1 for i in broken_at if kind == "renamed_call"]  # a renamed call's result names the new tool
        assert messages_other_than(first.conversation, broken_at | set(results)) == \
            messages_other_than(conv, broken_at | set(results))


@pytest.mark.parametrize("kind", ["shuffled_words", "looped_sentence", "insult_added", "truncated_reply",
                                  "ungrounded_numbers", "claimed_action"])
def test_the_seed_changes_the_draw(kind):
    drawn = {json.dumps(break_conversation(shop(), kind, seed=s).conversation) for s in range(10)}
    assert len(drawn) >= 2


def test_shuffled_words_keeps_each_replys_words_in_another_order():
    conv = shop()
    conv["messages"][-1] = reply("Bye now")  # two words: nothing to shuffle
    broken = break_conversation(conv, "shuffled_words", seed=0)
    assert [t["index"] for t in broken.turns] == [4, 8]
    for turn in broken.turns:
        assert sorted(turn["broken"].split()) == sorted(turn["original"].split())
        assert turn["broken"].split() != turn["original"].split()
    assert broken.conversation["messages"][-1]["content"] == "Bye now"


def test_foreign_reply_takes_every_reply_from_another_conversation():
    conv, other = shop(), weather()
    pool = ReplyPool([conv, other])
    broken = break_conversation(conv, "foreign_reply", seed=0, pool=pool)
    theirs = {message_text(other["messages"][i]) for i in (1, 3)}
    assert [t["index"] for t in broken.turns] == [4, 8, 10]
    assert all(t["broken"] in theirs for t in broken.turns)
    assert break_conversation(conv, "foreign_reply", seed=0, pool=None) is None
    assert break_conversation(conv, "foreign_reply", seed=0, pool=ReplyPool([conv])) is None


def test_looped_sentence_repeats_one_sentence_of_one_reply():
    broken = break_conversation(shop(), "looped_sentence", seed=1)
    (turn,) = broken.turns
    sentences = re.findall(r"[^.!?]+[.!?]", turn["broken"])
    looped = max(set(s.strip() for s in sentences), key=lambda s: turn["broken"].count(s))
    assert 4 <= turn["broken"].count(looped) <= 7 and turn["original"].count(looped) == 1
    assert turn["broken"].replace(" " + looped, "", turn["broken"].count(looped) - 1) == turn["original"]


def inserted(original: str, broken: str) -> str:
    """What was inserted into `original` to make `broken` (whitespace normalised)."""
    a, b = " ".join(original.split()), " ".join(broken.split())
    start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
    end = next((i for i, (x, y) in enumerate(zip(reversed(a[start:]), reversed(b[start:]))) if x != y),
               len(a) - start)
    assert a[:start] + a[len(a) - end:] == a
    return b[start:len(b) - end].strip()


def test_insult_added_adds_one_insult_and_keeps_the_reply():
    slots = {r"\{a\}": "an?", r"\{adj\}": "[a-z-]+", r"\{Adj\}": "[A-Z][a-z-]+", r"\{noun\}": "[a-z]+"}
    composed = []
    for frame in breakages._INSULT_FRAMES:
        pattern = re.escape(frame)
        for slot, fill in slots.items():
            pattern = pattern.replace(slot, fill)
        composed.append(pattern)
    kinds = set()
    for seed in range(12):
        (turn,) = break_conversation(shop(), "insult_added", seed=seed).turns
        insult = inserted(turn["original"], turn["broken"])
        fixed = insult in breakages._INSULTS
        kinds.add(fixed)
        assert fixed or any(re.fullmatch(c, insult) for c in composed), insult
        if not fixed:
            assert any(a in insult.lower() for a in breakages._INSULT_ADJECTIVES)
            assert any(n in insult for n in breakages._INSULT_NOUNS)
    assert kinds == {True, False}  # both fixed phrasings and composed ones


def test_ungrounded_numbers_change_every_number_and_id_of_a_reply_to_values_found_nowhere():
    conv = lookup_only()
    broken = break_conversation(conv, "ungrounded_numbers", seed=0)
    (turn,) = broken.turns
    assert set(broken.notes["replaced"]) == {"B7730", "4421"}  # the list markers 1. and 2. are no claims
    for old, new in broken.notes["replaced"].items():
        assert old not in turn["broken"] and new in turn["broken"]
        assert new not in json.dumps(conv) and len(new) == len(old)
    assert "\n1. with the card" in turn["broken"] and "\n2. by transfer" in turn["broken"]
    no_numbers = {"id": "n", "messages": [user("hi"), reply("Hello, how can I help you today?")]}
    assert break_conversation(no_numbers, "ungrounded_numbers") is None


def test_claimed_action_removes_a_write_and_claims_it_was_done():
    conv = shop()
    broken = break_conversation(conv, "claimed_action", seed=0)
    assert broken.notes["variant"] == "write_removed" and broken.touches_decision
    assert broken.notes["removed_call"]["name"] == "cancel_order"
    messages = broken.conversation["messages"]
    assert len(messages) == len(conv["messages"]) - 2
    assert not any(c["function"]["name"] == "cancel_order" for m in messages for c in m.get("tool_calls") or ())
    assert not any(m.get("tool_call_id") == "c2" for m in messages)
    (turn,) = broken.turns
    assert (turn["original_index"], turn["index"]) == (8, 6)
    assert "cancelled" in turn["broken"] and "W4821" in turn["broken"]
    assert messages[6]["content"] == turn["broken"]


def test_claimed_action_adds_a_claim_where_no_write_was_made():
    conv = lookup_only()
    broken = break_conversation(conv, "claimed_action", seed=0)
    assert broken.notes["variant"] == "claim_added" and not broken.touches_decision
    (turn,) = broken.turns
    assert turn["original"] in turn["broken"] and len(turn["broken"]) > len(turn["original"])
    claim = turn["broken"].replace(turn["original"], "")
    assert re.search(r"\b(cancelled|updated)\b", claim)  # the declared writes, never called here
    called = [c["function"]["name"] for m in broken.conversation["messages"] for c in m.get("tool_calls") or ()]
    assert called == ["get_order"]


def test_ungrounded_argument_changes_one_supplied_value_of_a_write():
    conv = shop()
    broken = break_conversation(conv, "ungrounded_argument", seed=0)
    assert broken.touches_decision
    assert broken.notes["argument"] == "order_id" and broken.notes["from"] == "W4821"  # the enum reason is no value
    new = broken.notes["to"]
    assert new not in json.dumps(conv) and re.fullmatch(r"W\d{4}", new)
    changed = broken.conversation["messages"][6]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(changed) == {"order_id": new, "reason": "no longer needed"}
    assert '": "' in changed  # written in the log's style
    assert broken.conversation["messages"][2] == conv["messages"][2]  # the lookup is untouched
    ungrounded = shop()
    ungrounded["messages"][1] = user("Hi, I want to cancel an order please.")
    ungrounded["messages"][2:8] = [call("c2", "cancel_order", {"order_id": "Z1", "reason": "mistake"})]
    assert break_conversation(ungrounded, "ungrounded_argument") is None


def test_renamed_call_picks_another_write_that_takes_the_same_arguments():
    conv = shop()
    broken = break_conversation(conv, "renamed_call", seed=0)
    assert broken.notes == {"from": "cancel_order", "to": "update_address", "decision": True}
    renamed = broken.conversation["messages"][6]["tool_calls"][0]["function"]
    assert renamed == {"name": "update_address", "arguments": conv["messages"][6]["tool_calls"][0]["function"][
        "arguments"]}
    assert broken.conversation["messages"][7]["name"] == "update_address"
    alone = shop()
    alone["tools"] = TOOLS[:1]
    assert break_conversation(alone, "renamed_call") is None
    # A tool taking the very same parameters is no wrong call anyone could tell: never the target.
    look = lookup_only()
    look["tools"] = [declare("get_order", order_id=STRING), declare("find_order", order_id=STRING),
                     declare("list_stores")]
    assert {break_conversation(look, "renamed_call", seed=s).notes["to"] for s in range(5)} == {"list_stores"}
    look["tools"] = look["tools"][:2]
    assert break_conversation(look, "renamed_call") is None


def test_repeated_call_retries_a_failed_call_unchanged_else_a_write():
    conv = shop()
    conv["messages"][7] = result("c2", "cancel_order", "Error: the order is being packed")
    broken = break_conversation(conv, "repeated_call", seed=0)
    assert broken.notes == {"repeated": "cancel_order", "after": "error", "decision": True}
    messages = broken.conversation["messages"]
    assert len(messages) == len(conv["messages"]) + 2
    again, answer = messages[8], messages[9]
    assert again["tool_calls"][0]["function"] == conv["messages"][6]["tool_calls"][0]["function"]
    assert again["tool_calls"][0]["id"] != "c2" and answer["tool_call_id"] == again["tool_calls"][0]["id"]
    assert answer["content"] == "Error: the order is being packed"
    assert messages[:8] == conv["messages"][:8] and messages[10:] == conv["messages"][8:]
    assert (broken.turns[0]["index"], broken.turns[0]["original_index"]) == (8, 6)
    # Nothing failed: the write that took effect is made twice; a lookup alone is never repeated.
    assert break_conversation(shop(), "repeated_call", seed=0).notes["after"] == "success"
    assert break_conversation(lookup_only(), "repeated_call", seed=0) is None


def test_skipped_lookup_removes_the_lookup_that_alone_grounded_the_reply():
    conv = shop()
    conv["messages"][4] = reply("Order W4821 is pending and its total is $129.50, with 3 items. Shall I cancel it?")
    conv["messages"][3] = result("c1", "get_order", '{"order_id": "W4821", "status": "pending", "items": 3}')
    broken = break_conversation(conv, "skipped_lookup", seed=0)
    # W4821 is the user's own words; only the lookup said 3.
    assert broken.notes == {"removed_call": {"name": "get_order", "arguments": '{"order_id": "W4821"}'},
                            "stated": ["3"], "decision": False}
    messages = broken.conversation["messages"]
    assert messages == conv["messages"][:2] + conv["messages"][4:]
    (turn,) = broken.turns
    assert (turn["index"], turn["original_index"]) == (2, 4) and turn["broken"] == turn["original"]
    grounded = shop()  # the reply states nothing the lookup alone supplied
    grounded["messages"][4] = reply("Order W4821 is pending. Shall I cancel it?")
    assert break_conversation(grounded, "skipped_lookup") is None


def test_empty_and_truncated_replies():
    conv = shop()
    empty = break_conversation(conv, "empty_reply", seed=0)
    (turn,) = empty.turns
    assert empty.conversation["messages"][turn["index"]]["content"] == "" and turn["original"]
    cut = break_conversation(conv, "truncated_reply", seed=0)
    (turn,) = cut.turns
    assert turn["original"].startswith(turn["broken"])
    assert 0.2 * len(turn["original"]) < len(turn["broken"]) < 0.8 * len(turn["original"])
    assert not turn["broken"].endswith((".", "!", "?", ":", ","))
    assert len(turn["original"].split()) >= 8


@pytest.mark.parametrize("kind", KINDS)
def test_none_where_a_kind_does_not_apply(kind):
    # A one-word reply before the user spoke, no call; or, for the kinds any reply will do, no reply at all.
    greeting = {"id": "g", "messages": [reply("Hello!"), user("hi")], "tools": copy.deepcopy(TOOLS), "metadata": {}}
    silent = {"id": "s", "messages": [user("hi"), call("c1", "transfer_to_human", {"summary": "wants a person"})],
              "tools": [], "metadata": {}}
    conv = silent if kind in ("foreign_reply", "insult_added", "empty_reply") else greeting
    assert break_conversation(conv, kind, pool=ReplyPool([conv, weather()])) is None


def test_unknown_kinds_name_the_valid_ones():
    assert parse_kinds("renamed_call, shuffled_words") == ("shuffled_words", "renamed_call")
    with pytest.raises(InputError, match="unknown breakage kind 'loops'; choose from shuffled_words, foreign_reply"):
        parse_kinds("loops,renamed_call")


# ------------------------------------------------------------------------------------------------------ the CLI
# The toy reward scores a text turn by keyword (GOOD 1.0, BAD 0.1), an empty turn is not applicable (0.5 for a
# conversation without an applicable turn).


@pytest.fixture
def logs(tmp_path):
    write_transcripts(tmp_path / "in", [
        chat("a", "Where is my order?", "GOOD news, your order left the warehouse this morning."),
        chat("b", "Can I return this lamp?", "BAD luck, returns for that lamp closed last week."),
    ])
    return tmp_path / "in"


def robustness(capsys, logs, *args):
    capsys.readouterr()
    assert main(["improve", "audit", "--robustness", "--transcripts", str(logs), "--reward", "improve_toy",
                 "--kinds", "empty_reply,foreign_reply,insult_added", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_win_rates_ties_and_the_examples_that_fooled_the_reward(logs, capsys):
    report = robustness(capsys, logs)
    assert report["step"] == "robustness" and report["conversations"] == 2
    assert report["reward"]["component"] == "reward:improve_toy"
    kinds = report["kinds"]
    assert list(kinds) == ["foreign_reply", "insult_added", "empty_reply"]
    tally = {k: (v["applied"], v["wins"], v["ties"], v["losses"], v["win_rate"]) for k, v in kinds.items()}
    # a (GOOD) beats its empty copy (0.5), b (BAD 0.1) loses to its own; a's reply swapped for b's is a win, and b's
    # for a's a loss; the toy reward does not see insults: two ties.
    assert tally == {"foreign_reply": (2, 1, 0, 1, 0.5), "insult_added": (2, 0, 2, 0, 0.5),
                     "empty_reply": (2, 1, 0, 1, 0.5)}
    assert kinds["empty_reply"]["mean_drop"] == pytest.approx(((1.0 - 0.5) + (0.1 - 0.5)) / 2)
    (fooled,) = kinds["foreign_reply"]["examples"]
    assert fooled["conversation_id"] == "b" and fooled["outcome"] == "loss"
    assert (fooled["original_score"], fooled["broken_score"]) == (pytest.approx(0.1), 1.0)
    assert fooled["broken"].startswith("GOOD news") and fooled["original"].startswith("BAD luck")
    assert fooled["reason"] == "keyword score 1.0" and fooled["turn_index"] == 2
    assert [e["outcome"] for e in kinds["insult_added"]["examples"]] == ["tie", "tie"]
    assert report["weakest"] == "foreign_reply"  # the lowest win rate, the first kind among equals


def test_the_report_is_deterministic_and_written_atomically(logs, capsys, tmp_path):
    out = tmp_path / "reports" / "robustness.json"
    first = robustness(capsys, logs, "--seed", "7", "--examples", "1", "--output", str(out))
    assert json.loads(out.read_text()) == first
    assert robustness(capsys, logs, "--seed", "7", "--examples", "1") == first
    assert all(len(k["examples"]) <= 1 for k in first["kinds"].values())
    assert first["limit"] is None and first["transcripts"]["sha256"] and first["seed"] == 7
    only_a = robustness(capsys, logs, "--limit", "1")
    assert only_a["conversations"] == 1 and only_a["limit"] == 1
    assert only_a["kinds"]["foreign_reply"]["applied"] == 0  # no other conversation to take a reply from
    assert [p.name for p in out.parent.iterdir()] == ["robustness.json"]  # no temp file left behind


def test_the_policy_reaches_the_reward(logs, capsys, tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text('{"min_words": 100}')  # the toy reward then finds no turn applicable: every score 0.5
    plain = robustness(capsys, logs)
    report = robustness(capsys, logs, "--policy", str(policy))
    assert report["reward"]["config_sha256"] != plain["reward"]["config_sha256"]
    assert {k: (v["ties"], v["win_rate"]) for k, v in report["kinds"].items()} == {
        "foreign_reply": (2, 0.5), "insult_added": (2, 0.5), "empty_reply": (2, 0.5)}


def test_table_output(logs, capsys):
    capsys.readouterr()
    assert main(["improve", "audit", "--robustness", "--transcripts", str(logs), "--reward", "improve_toy"]) == 0
    text = capsys.readouterr().out
    for fragment in ("robustness of reward:improve_toy 1.2.0", "win rate", "ceiling", "empty_reply",
                     "foreign_reply", "copies that fooled the reward", "weakest:"):
        assert fragment in text


def test_the_subprocess_runtime_gives_the_same_report(logs, capsys):
    inprocess = robustness(capsys, logs)
    child = subprocess.run(
        [sys.executable, "-m", "stateset_agents", "improve", "audit", "--robustness", "--transcripts", str(logs),
         "--reward", "improve_toy", "--kinds", "empty_reply,foreign_reply,insult_added", "--runtime", "subprocess",
         "--json"], capture_output=True, text=True, env=os.environ, timeout=120)
    assert child.returncode == 0, child.stderr
    served = json.loads(child.stdout)
    assert served.pop("runtime") == "subprocess" and inprocess.pop("runtime") == "inprocess"
    assert served == inprocess


def test_decisions_only_counts_the_copies_that_change_a_write(tmp_path, capsys):
    write_transcripts(tmp_path / "in", [shop(), lookup_only()])
    capsys.readouterr()

    def audit(*extra):
        assert main(["improve", "audit", "--robustness", "--transcripts", str(tmp_path / "in"), "--reward",
                     "improve_toy", "--kinds", "claimed_action", *extra, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    every, decisions = audit(), audit("--decisions-only")
    assert every["decisions_only"] is False and decisions["decisions_only"] is True
    # the shop's write removed and claimed is a decision; a claim added to the lookup-only chat is not
    assert (every["kinds"]["claimed_action"]["applied"], decisions["kinds"]["claimed_action"]["applied"]) == (2, 1)
    assert decisions["kinds"]["claimed_action"]["not_applicable"] == 1
    assert main(["improve", "audit", "--graded", "g.jsonl", "--decisions-only"]) == 2
    assert "--decisions-only: only with --robustness" in capsys.readouterr().err.replace("\n", "")


@pytest.mark.parametrize("args, message", [
    (["--robustness", "--transcripts", "IN", "--reward", "improve_toy", "--kinds", "loops"],
     "unknown breakage kind 'loops'; choose from shuffled_words, foreign_reply, looped_sentence"),
    (["--robustness", "--transcripts", "IN", "--reward", "improve_toy", "--graded", "g.jsonl"],
     "--robustness grades the transcripts itself"),
    (["--robustness", "--reward", "improve_toy"], "--robustness needs --transcripts DIR"),
    (["--robustness", "--transcripts", "IN"], "name the reward with --reward"),
    (["--robustness", "--transcripts", "IN", "--reward", "improve_toy", "--examples", "-1"],
     "examples must be 0 or more"),
    (["--robustness", "--transcripts", "MISSING", "--reward", "improve_toy"], "file not found"),
    (["--robustness", "--transcripts", "IN", "--reward", "improve_toy", "--limit", "0"], "limit must be at least 1"),
    (["--labels", "labels.jsonl"], "give --graded FILE (graded.jsonl from `improve run`), or --robustness"),
    (["--graded", "g.jsonl", "--labels", "l.jsonl", "--reward", "improve_toy", "--kinds", "empty_reply"],
     "--reward, --kinds: only with --robustness"),
])
def test_bad_input_is_named(logs, tmp_path, capsys, args, message):
    args = [str(logs) if a == "IN" else str(tmp_path / "missing") if a == "MISSING" else a for a in args]
    assert main(["improve", "audit", *args]) == 2
    assert message in capsys.readouterr().err.replace("\n", "")


class ZeroReward(Reward):
    """Scores a text turn 0 when it says ZERO, else 1; a turn without text is not applicable."""

    name, version = "zero", "1.0.0"

    def grade_turn(self, conversation, turn_index):
        text = message_text(conversation["messages"][turn_index])
        if not text:
            return TurnGrade.not_applicable("no text")
        return TurnGrade(0.0 if "ZERO" in text else 1.0)


def test_originals_at_zero_bound_the_win_rate_and_keep_filters_copies():
    convs = [chat("z", "hi", "ZERO is all I can say to you today."), chat("f", "hi", "Fine, here is what I found.")]
    report = robustness_report(convs, ZeroReward(), kinds=["empty_reply", "renamed_call"])
    empty = report["kinds"]["empty_reply"]
    # z: 0 -> 0.5 (no applicable turn left), a loss; f: 1 -> 0.5, a win.
    assert (empty["wins"], empty["losses"], empty["originals_at_zero"]) == (1, 1, 1)
    assert empty["best_possible"] == 0.75 and empty["win_rate"] == 0.5
    low, high = empty["interval"]  # 95% Wilson, one success in two
    assert low == pytest.approx(0.0945, abs=1e-4) and high == pytest.approx(0.9055, abs=1e-4)
    assert report["kinds"]["renamed_call"]["applied"] == 0 and report["kinds"]["renamed_call"]["win_rate"] is None
    assert report["weakest"] == "empty_reply"
    kept = robustness_report(convs, ZeroReward(), kinds=["empty_reply"],
                             keep=lambda b: b.conversation["id"] == "f")
    assert kept["kinds"]["empty_reply"]["applied"] == 1 and kept["kinds"]["empty_reply"]["not_applicable"] == 1
