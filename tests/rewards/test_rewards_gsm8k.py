from fractions import Fraction

import pytest

from stateset_plugins.rewards.gsm8k import GSM8KReward, extract_answer
from tests.rewards.reward_builders import assistant, conversation, user


@pytest.mark.parametrize("text, expected", [
    ("so she makes 9 * 2 = $18\n#### 18", 18),
    ("The total is \\boxed{1,234}.", 1234),
    ("Half of it: \\boxed{\\frac{3}{4}}", Fraction(3, 4)),
    ("She pays 5 then 7\nA: 18", 18),
    ("The answer is $18.00 per day.", 18),
    ("the final answer is 2.5 kg", Fraction(5, 2)),
    ("He has 3 apples and buys 4 more, so 7 apples", 7),
    ("It dropped to -4 degrees", -4),
    ("Each share is 1/2", Fraction(1, 2)),
    ("1,000,000 people", 1000000),
    ("items 2,3 and 4", 4),               # "2,3" is two numbers, not 23
    ("#### 12\nbut later I wrote 99", 12),  # an explicit marker beats a trailing number
])
def test_extractor_reads_every_answer_format(text, expected):
    assert extract_answer(text)[0] == expected


def test_extractor_has_no_answer_without_a_number():
    assert extract_answer("I do not know")[0] is None


def test_reward_compares_reply_and_reference_with_the_same_extractor():
    reward = GSM8KReward()
    conv = conversation([user("q"), assistant("It is 18.0 dollars. The answer is 18")], reference_answer="#### 18")
    grade = reward.grade_turn(conv, 1)
    assert grade.applicable and grade.score == 1.0 and grade.breakdown["correct"] is True
    wrong = conversation([user("q"), assistant("A: 26")], reference_answer="... A: 18")
    assert reward.grade_turn(wrong, 1).score == 0.0
    assert "26" in reward.grade_turn(wrong, 1).reason


def test_reference_from_config_and_not_applicable_cases():
    conv = conversation([user("q"), assistant("#### 7")])
    assert GSM8KReward({"reference_answer": 7}).grade_turn(conv, 1).score == 1.0
    assert not GSM8KReward().grade_turn(conv, 1).applicable  # no reference anywhere
    call_only = conversation([user("q"), assistant(None, [("calc", "{}")])], reference_answer="7")
    assert not GSM8KReward().grade_turn(call_only, 1).applicable


def test_agrees_with_is_correct_on_all_real_solutions():
    from tests.helpers.realdata import gsm8k_solutions

    rows = gsm8k_solutions()
    keys = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
    agree = total = 0
    for row in rows:
        reference = extract_answer(row["ground_truth"])[0]
        for key in keys:
            total += 1
            agree += (extract_answer(row[key]["solution"])[0] == reference) == bool(row[key]["is_correct"])
    assert total == 1200
    assert agree == total, f"extractor agrees with is_correct on {agree}/{total}"


def test_improve_through_a_plugin_writes_what_in_process_writes_on_a_mixed_log(tmp_path):
    """Out of process, gsm8k answers the lines that cannot hold a reference without parsing them (`screen`); the
    files `improve` writes are byte for byte the in-process ones, and a key spelt with escapes is still found."""
    import orjson

    from stateset_agents.pipeline.improve import run_improve
    from tests.helpers.realdata import gsm8k_solutions, tau_log_records

    lines = []
    for i, row in enumerate(gsm8k_solutions()[:12]):
        messages = [user(row["question"]), assistant(row["6b_finetuning"]["solution"])]
        lines.append(orjson.dumps({"id": f"math-{i}", "messages": messages,
                                   "metadata": {"reference_answer": row["ground_truth"]}}))
    lines += [orjson.dumps(record) for record in tau_log_records()[:12]]
    lines.append(b'{"id":"escaped","messages":[{"role":"user","content":"2+2?"},{"role":"assistant","content":'
                 b'"#### 4"}],"metadata":{"\\u0072eference_answer":"4"}}')
    # The key's text as a value: not screened (it might be a key), so parsed, and found to hold no reference.
    lines.append(b'{"id":7,"messages":[{"role":"user","content":"reference_answer"},'
                 b'{"role":"assistant","content":"ok"}]}')
    screened = [GSM8KReward().screen(line) is not None for line in lines]
    assert screened == [False] * 12 + [True] * 12 + [False, False]
    transcripts = tmp_path / "transcripts.jsonl"
    transcripts.write_bytes(b"\n".join(lines) + b"\n")
    for runtime in ("inprocess", "subprocess"):
        run_improve(transcripts, "gsm8k", tmp_path / runtime, runtime=runtime, held_out_fraction=0.2)
    for name in ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl"):
        assert (tmp_path / "subprocess" / name).read_bytes() == (tmp_path / "inprocess" / name).read_bytes()
    rows = [orjson.loads(line) for line in (tmp_path / "subprocess" / "graded.jsonl").read_bytes().splitlines()]
    by_id = {row["conversation_id"]: row for row in rows}
    assert by_id["escaped"]["applicable"] and by_id["escaped"]["score"] == 1.0
    assert by_id["7"]["reason"] == "no reference_answer in metadata or config"
    assert sum(row["applicable"] for row in rows) == 13
