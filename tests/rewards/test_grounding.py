"""_grounding: a reply's values (amounts, dates, times, ids, names) are grounded in what came before it."""
from stateset_plugins.rewards._grounding import (GroundingIndex, context_values, digit_values, mentioned_values,
                                                 readable, ungrounded)
from tests.rewards.reward_builders import assistant, tool, user


def test_values_are_canonical_whatever_their_written_form():
    values = mentioned_values("Flight QZ104 leaves at 8:00 AM on May 20th, 2025 from LHR; total $1,250.00 for 2 bags.")
    assert set(values) == {"id:qz104", "t:08:00", "d:05-20", "n:2025", "n:1250", "id:lhr"}
    assert "n:2" not in values  # small counts need no source
    assert set(mentioned_values("2025-05-20T15:30, 3pm, the 4th of July")) == {
        "n:2025", "d:05-20", "t:15:30", "t:15:00", "d:07-04"}
    assert mentioned_values("Thank you, Zoltan.") == ["name:zoltan"]
    assert mentioned_values("20th floor, 50kg") == ["n:20", "n:50"]  # units and ordinals are numbers


def test_a_value_is_grounded_by_any_written_form_in_the_context():
    context = context_values([
        user("My account is ann_lee_204, I'd like my order changed"),
        tool("c1", '{"order": "QZ104", "date": "2025-05-20", "leaves": "08:00:00", "price": 1250.0, '
                   '"card": "card_88217791", "first_name": "Ann"}'),
    ], 2)
    reply = mentioned_values("Ann, order QZ104 on May 20 at 8:00 AM costs $1,250, paid by the card ending 7791.")
    assert ungrounded(reply, context) == []
    invented = mentioned_values("Ann, order QZ105 on May 21 at 9:00 AM costs $1,350 on the card ending 7792.")
    assert set(ungrounded(invented, context)) == {"id:qz105", "d:05-21", "t:09:00", "n:1350", "n:7792"}


def test_numbers_match_on_boundaries_not_inside_other_numbers():
    context = context_values([tool("c1", '{"total": 31250, "rate": 0.75, "fee": 45.5}')], 1)
    assert "n:3125" not in context and "n:125" not in context and "n:45" not in context  # 45.5 is not 45
    assert "n:1250" in context  # but four digits may be the last four of a longer number (a card, an account)
    assert "n:3/4" in context and "n:91/2" in context  # 0.75 and 45.5 themselves

    # a decimal may go on in zeros ("312.40" grounds 312.4), a whole number may not ("3120" is not 312)
    written = context_values([user("I was charged 312.40 and then 3120")], 1)
    assert "n:1562/5" in written and "n:312" not in written and "n:31" not in written


def test_digit_values_are_the_values_written_with_digits():
    text = "Flight QZ104 leaves at 8:00 AM on May 20th from LHR; total $1,250.00, thank you Zoltan."
    assert digit_values(text) == [v for v in mentioned_values(text) if v not in ("id:lhr", "name:zoltan")]
    assert digit_values("Thank you, Zoltan, from LHR.") == []
    assert [readable(v) for v in digit_values("That is $312.40 on May 2.")] == ["05-02", "312.4"]


def test_only_what_came_before_the_turn_grounds_it():
    messages = [user("hi"), assistant("Your order QZ104 ships today."), tool("c1", '{"order": "QZ104"}'),
                assistant("Order QZ104 ships today.")]
    index = GroundingIndex(messages)
    assert index.credit(["id:qz104"], 1) == (0.0, ["id:qz104"])
    assert index.credit(["id:qz104"], 3) == (1.0, [])
    assert index.credit(["id:qz104"], 1) == (0.0, ["id:qz104"])  # graded out of order: still the prefix only


def test_the_index_context_is_the_grounding_text_before_the_turn_on_the_first_call_too():
    messages = [user("Order QZ104, please"), assistant("Looking."), tool("c1", '{"order": "QZ104"}'),
                assistant("Order QZ104 ships today.")]
    assert "id:qz104" in GroundingIndex(messages).context(1)  # a fresh index: the user's message is there
    index = GroundingIndex(messages)
    for before in (3, 1, 4, 0):  # the same text as the one-off context, each piece closed by a newline
        assert index.context(before).text.rstrip("\n") == context_values(messages, before).text


def test_arithmetic_on_stated_grounded_numbers_earns_half_credit():
    messages = [tool("c1", '{"fare": 300, "bag": 50}')]
    index = GroundingIndex(messages)
    score, invented = index.credit(mentioned_values("The fare is $300 and a bag $50, so $350 in all."), 1)
    assert invented == [] and score == (1 + 1 + 0.5) / 3
    score, invented = index.credit(mentioned_values("The fare is $300 and a bag $50, so $377 in all."), 1)
    assert invented == ["n:377"] and score == 2 / 3


def test_a_date_the_user_asked_for_relative_to_a_grounded_one_is_grounded():
    reservation = tool("c1", '{"flights": [{"date": "2024-05-18"}]}')
    reply = mentioned_values("Flight HAT072 on May 19 is available.")
    asked = GroundingIndex([user("Move my flight to the day after, please."), reservation])
    assert asked.credit(["d:05-19"], 2) == (1.0, [])
    assert asked.credit(["d:05-21"], 2) == (0.0, ["d:05-21"])  # three days off: no shift the user spoke of
    unasked = GroundingIndex([user("Any cheaper flights?"), reservation])
    assert unasked.credit([v for v in reply if v.startswith("d:")], 2) == (0.0, ["d:05-19"])
    month_end = GroundingIndex([user("I need to go two days later."), tool("c1", '{"date": "2024-02-28"}')])
    assert month_end.credit(["d:03-01"], 2) == (1.0, [])  # across a month's end (2024 is a leap year)


def test_day_shifts_are_read_from_how_people_speak_of_them():
    from stateset_plugins.rewards._relative_days import day_shifts, shifted_dates

    assert day_shifts("can i fly the next day, or maybe two days later?") == {1, 2}
    assert day_shifts("tomorrow works. delay it by a day") == {1}
    assert day_shifts("have a nice day! see you on monday, today") == frozenset()
    assert day_shifts("i'll stay 45 days") == frozenset()  # a stay, not a date moved
    assert shifted_dates("2024-05-18", frozenset({1})) == ["2024-05-17", "2024-05-19"]
    assert shifted_dates("not a date", frozenset({1})) == [] and shifted_dates("0001-01-01", frozenset({1})) == [
        "0001-01-02"]


def test_the_assistant_grounds_nothing_for_itself():
    messages = [user("hi"), assistant("Your code is ZX9931."), user("ok"), assistant("Code ZX9931 is active.")]
    assert GroundingIndex(messages).credit(["id:zx9931"], 3) == (0.0, ["id:zx9931"])


def test_whole_numbers_are_found_as_written_with_or_without_separators():
    from stateset_plugins.rewards._grounding import first_grounding

    text = "paid 1,250 on card 88217791, ref 0042 and 31250; then 1250.00 and 12,500.50"
    end = len(text)
    assert first_grounding("n:1250", text, 0, end) == len("paid 1,250")  # the separated form comes first
    assert first_grounding("n:1250", text, 11, end) == text.index(";")  # four digits: the last of 31250
    assert first_grounding("n:31250", text, 0, end) == text.index(";")
    assert first_grounding("n:7791", text, 0, end) == text.index(", ref")  # a card's last four
    assert first_grounding("n:3125", text, 0, end) == -1  # not inside a longer number
    assert first_grounding("n:12500", text, 0, end) == -1  # 12,500.50 is not 12500
    assert first_grounding("n:0042", text, 0, end) == text.index(" and 31250")  # (read as 42, its last digits)
    assert first_grounding("n:42", text, 0, end) == -1
    assert first_grounding("id:ref", text, 0, end) == text.index(" 0042")
