from fractions import Fraction

import pytest

from reward_builders import assistant, conversation, user
from stateset_plugins.rewards.gsm8k import GSM8KReward, extract_answer


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
    from helpers.realdata import gsm8k_solutions

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
