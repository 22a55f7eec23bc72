import json

import pytest

from stateset_plugins.rewards.tool_calling import CONDUCT_WEIGHT, ToolCallingReward
from tests.rewards.reward_builders import assistant, conversation, tool, user

TOOLS = [
    {"type": "function", "function": {"name": "get_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {"name": "refund", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"},
                                         "items": {"type": "array", "items": {"type": "string"}}},
        "required": ["order_id", "amount"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "transfer_to_human", "parameters": {"type": "object"}}},
]


def refund_call(arguments):
    return ("refund", arguments if isinstance(arguments, str) else json.dumps(arguments))


def test_expected_call_matches_after_normalising_numbers_case_and_list_order():
    expected = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 250, "items": ["x", "y"]}}]
    conv = conversation([
        user("refund please"),
        assistant(None, [refund_call({"order_id": " a1 ", "amount": 250.0, "items": ["y", "x"]})]),
        tool("call_0_refund", '{"ok": true}'),
        assistant("Done."),
    ], TOOLS, expected_tool_calls=expected)
    reward = ToolCallingReward()
    call_grade = reward.grade_turn(conv, 1)
    assert call_grade.score == 1.0 and call_grade.breakdown["calls"][0]["match"] == "expected call"
    last = reward.grade_turn(conv, 3)  # the final turn judges completion: 1 of 1 made
    assert last.applicable and last.score == 1.0 and last.breakdown["expected_done"] == "1/1"


def test_ordered_arguments_keep_list_order_when_configured():
    expected = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 1, "items": ["x", "y"]}}]
    conv = conversation([user("u"), assistant(None, [refund_call({"order_id": "A1", "amount": 1,
                                                                   "items": ["y", "x"]})])],
                        TOOLS, expected_tool_calls=expected)
    assert ToolCallingReward().grade_turn(conv, 1).breakdown["calls"][0]["score"] == 1.0
    strict = ToolCallingReward({"ordered_arguments": ["items"]}).grade_turn(conv, 1)
    assert strict.breakdown["calls"][0]["score"] < 1.0


def test_nan_and_infinity_in_arguments_are_graded_not_raised():
    """json.loads reads NaN and Infinity: a model that writes them gets a grade (no agreement on NaN), and the
    run does not stop at its line."""
    expected = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 250}}]
    reward = ToolCallingReward()
    for amount, agrees in (("NaN", False), ("Infinity", False), ("250", True)):
        conv = conversation([user("refund A1, 250"),
                             assistant(None, [refund_call('{"order_id": "A1", "amount": %s}' % amount)])],
                            TOOLS, expected_tool_calls=expected)
        call = reward.grade_turn(conv, 1).breakdown["calls"][0]
        assert (call["score"] == 1.0) is agrees, (amount, call)


def test_wrong_arguments_get_partial_credit_and_missing_calls_cost_completion():
    expected = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 250}}]
    conv = conversation([
        user("refund"),
        assistant(None, [refund_call({"order_id": "A1", "amount": 300})]),
        tool("call_0_refund", '{"ok": true}'),
        assistant("Refunded 300."),
    ], TOOLS, expected_tool_calls=expected)
    reward = ToolCallingReward()
    wrong = reward.grade_turn(conv, 1)
    assert 0 < wrong.score <= 0.5 and "agree" in wrong.reason
    assert reward.grade_turn(conv, 3).breakdown["expected_done"] == "0/1"


def test_lookups_are_neutral_and_unexpected_writes_score_zero():
    conv = conversation([
        user("what's my order A1?"),
        assistant(None, [("get_order", '{"order_id": "A1"}')]),
        tool("call_0_get_order", '{"status": "shipped"}'),
        assistant(None, [refund_call({"order_id": "A1", "amount": 5})]),
        tool("call_0_refund", '{"ok": true}'),
        assistant("Here it is."),
    ], TOOLS, expected_tool_calls=[])  # empty: the right behaviour changes nothing
    reward = ToolCallingReward()
    assert not reward.grade_turn(conv, 1).applicable
    write = reward.grade_turn(conv, 3)
    # the write itself scores 0; only its clean conduct (fits its tool, grounded) earns the conduct weight
    assert write.breakdown["expected"] == 0.0 and "unexpected write" in write.reason
    assert write.score == CONDUCT_WEIGHT
    assert reward.grade_turn(conv, 5).score == 1.0  # completion: nothing was expected


def test_an_errored_call_does_not_use_up_the_expected_call():
    expected = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 250}}]
    conv = conversation([
        user("refund"),
        assistant(None, [refund_call({"order_id": "A1", "amount": 25})]),
        tool("call_0_refund", "Error: amount does not match"),
        assistant(None, [refund_call({"order_id": "A1", "amount": 250})]),
        tool("call_0_refund", '{"ok": true}'),
        assistant("Done."),
    ], TOOLS, expected_tool_calls=expected)
    reward = ToolCallingReward()
    assert reward.grade_turn(conv, 3).score == 1.0
    assert reward.grade_turn(conv, 5).breakdown["expected_done"] == "1/1"


def test_a_failed_call_repeated_unchanged_earns_no_second_partial_credit():
    expected = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 250}}]
    attempt = [assistant(None, [refund_call({"order_id": "A1", "amount": 25})]),
               tool("call_0_refund", "Error: amount does not match")]
    conv = conversation([user("refund 250 on order A1")] + attempt + attempt + [assistant("Sorry.")], TOOLS,
                        expected_tool_calls=expected)
    reward = ToolCallingReward()
    first, again = reward.grade_turn(conv, 1), reward.grade_turn(conv, 3)
    assert first.breakdown["expected"] > 0 and again.breakdown["expected"] == 0.0
    assert "repeats a failed call" in again.reason and again.score < first.score


def test_turn_context_is_the_prefix_only():
    expected = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 1}}]
    calls = [user("u"), assistant(None, [refund_call({"order_id": "A1", "amount": 1})]), tool("call_0_refund", "{}")]
    conv = conversation(calls + [assistant(None, [refund_call({"order_id": "A1", "amount": 1})]),
                                 tool("call_0_refund", "{}")], TOOLS, expected_tool_calls=expected)
    reward = ToolCallingReward()
    assert reward.grade_turn(conv, 1).score == 1.0  # first call consumes the expected one...
    assert reward.grade_turn(conv, 3).score < 1.0  # ...so an identical second call is a duplicate write


def test_schema_mode_rejects_invalid_json_invented_tools_and_schema_violations():
    reward = ToolCallingReward()

    def grade(name, arguments):  # the user supplies the values and the go-ahead: only the schema is at stake
        conv = conversation([user("Yes, please refund 3 on order A1."), assistant(None, [(name, arguments)])], TOOLS)
        return reward.grade_turn(conv, 1)

    assert grade("refund", '{"order_id": "A1", "amount": 3}').score == 1.0
    bad_json = grade("refund", '{"order_id": "A1", "amount": ')
    assert bad_json.score < 0.5 and "not valid JSON" in bad_json.reason
    invented = grade("delete_account", "{}")
    assert invented.score == 0.0 and "invented tool" in invented.reason
    wrong_type = grade("refund", '{"order_id": "A1", "amount": "lots"}')
    assert 0 < wrong_type.score < 1 and "schema" in wrong_type.reason
    extra = grade("refund", '{"order_id": "A1", "amount": 1, "note": "x"}')
    assert extra.score < 1.0
    assert not reward.grade_turn(conversation([user("u"), assistant("hi")], TOOLS), 1).applicable


def test_invalid_json_and_invented_tools_also_fail_with_expected_calls():
    expected = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 1}}]
    conv = conversation([user("u"), assistant(None, [("refund", "{oops"), ("make_up", "{}")])],
                        TOOLS, expected_tool_calls=expected)
    grade = ToolCallingReward().grade_turn(conv, 1)
    assert grade.score == 0.0
    assert [c["match"] for c in grade.breakdown["calls"]][1] == "invented tool"


def test_real_tau_airline_auc(score_auc):
    from tests.helpers.realdata import tau_log_records

    reward = ToolCallingReward()
    with_expected, _ = score_auc(reward, tau_log_records(with_expected_calls=True))
    without_expected, _ = score_auc(reward, tau_log_records(with_expected_calls=False))
    print(f"\ntool_calling ROC AUC on tau-airline dev: with expected calls {with_expected:.3f}, "
          f"without {without_expected:.3f} (no threshold)")
    # Fixed rules, nothing fitted: the pooled AUC is the out-of-fold figure (measured 0.934 and 0.700 for 2.4.0;
    # 2.3.0 gave 0.664, version 1 0.934 and 0.562). The margins are below the measured values, well inside the +-0.1
    # of 100 conversations.
    assert with_expected >= 0.91
    assert without_expected >= 0.68


# ------------------------------------------------------------------------------ judged from the conversation itself
ADDRESS_TOOLS = [
    {"type": "function", "function": {"name": "get_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {"name": "update_shipping_address", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}, "address": {"type": "string"},
                                         "speed": {"type": "string", "enum": ["standard", "express"]}},
        "required": ["order_id", "address"]}}},
]


def address_conversation(address_argument, *, user_says_yes=True, order_in_result="NW-1"):
    """The user asks to change an address; the agent looks the order up, proposes, and writes."""
    return conversation([
        user("Please change the address on NW-1 to 48 Elm Street, Austin 78701."),
        assistant(None, [("get_order", '{"order_id": "NW-1"}')]),
        tool("call_0_get_order", json.dumps({"order_id": order_in_result, "status": "processing"})),
        assistant("I'll change the address on NW-1 to 48 Elm Street, Austin 78701. Shall I go ahead?"),
        user("Yes, please." if user_says_yes else "Hmm, let me think about it."),
        assistant(None, [("update_shipping_address", json.dumps(
            {"order_id": "NW-1", "address": address_argument, "speed": "express"}))]),
        tool("call_0_update_shipping_address", '{"ok": true}'),
    ], ADDRESS_TOOLS)


def test_an_argument_value_found_nowhere_in_the_context_scores_lower():
    reward = ToolCallingReward()
    said = reward.grade_turn(address_conversation("48 Elm Street, Austin 78701"), 5)
    invented = reward.grade_turn(address_conversation("12 Oak Avenue, Boston 02101"), 5)
    assert said.score == 1.0 and said.breakdown["grounded"] == 1.0
    assert invented.breakdown["grounded"] == 0.5  # the order id was said, the address was not
    assert invented.score < said.score and "found nowhere" in invented.reason
    # a declared enum option ("express") is a choice, not a fact: it needs no grounding
    assert "express" not in invented.reason


def test_values_match_after_normalising_numbers_and_dates():
    tools = [{"type": "function", "function": {"name": "search_flights", "parameters": {
        "type": "object", "properties": {"date": {"type": "string"}, "budget": {"type": "number"}}}}}]
    reward = ToolCallingReward()

    def grade(arguments):
        conv = conversation([user("I'd like to fly on May 20th, budget $1,250."),
                             assistant(None, [("search_flights", json.dumps(arguments))])], tools)
        return reward.grade_turn(conv, 1)

    assert grade({"date": "2024-05-20", "budget": 1250}).breakdown["grounded"] == 1.0
    assert grade({"date": "2024-05-21", "budget": 1250.0}).breakdown["grounded"] == 0.5
    assert grade({"date": "2024-05-20", "budget": 1350}).breakdown["grounded"] == 0.5


def test_a_date_shifted_as_the_user_asked_and_a_value_the_system_prompt_states_are_grounded():
    tools = [{"type": "function", "function": {"name": "search_flights", "parameters": {
        "type": "object", "properties": {"date": {"type": "string"}, "budget": {"type": "number"}}}}}]
    reward = ToolCallingReward()

    def grade(asked, arguments, system="You are a travel agent."):
        conv = conversation([{"role": "system", "content": system}, user(f"My flight is on May 20th. {asked}"),
                             assistant(None, [("search_flights", json.dumps(arguments))])], tools)
        return reward.grade_turn(conv, 2).breakdown["grounded"]

    # "the next day" after a date in the context: the date the agent works out is grounded, either way round
    assert grade("Can I fly the next day instead?", {"date": "2024-05-21"}) == 1.0
    assert grade("Move it back one day.", {"date": "2024-05-19"}) == 1.0
    assert grade("Could I go two days later?", {"date": "2024-05-22"}) == 1.0
    # no shift spoken of, or a date the shift does not reach: made up
    assert grade("Is there anything cheaper?", {"date": "2024-05-21"}) == 0.0
    assert grade("Can I fly the next day instead?", {"date": "2024-05-24"}) == 0.0
    # the system prompt is context the agent was given (a price list), as it is for a reply's facts
    assert grade("What is there?", {"date": "2024-05-20", "budget": 1250}) == 0.5
    assert grade("What is there?", {"date": "2024-05-20", "budget": 1250},
                 system="Fares are capped at $1,250 per ticket.") == 1.0


def test_an_errored_call_scores_low_and_a_blind_retry_lower_still():
    reward = ToolCallingReward()
    calls = [user("Look up order A1 and B2 please."),
             assistant(None, [("get_order", '{"order_id": "A1"}')]),
             tool("call_0_get_order", "Error: order not found")]
    blind = conversation(calls + [assistant(None, [("get_order", '{"order_id":"A1"}')]),
                                  tool("call_0_get_order", "Error: order not found")], TOOLS)
    changed = conversation(calls + [assistant(None, [("get_order", '{"order_id": "B2"}')]),
                                    tool("call_0_get_order", '{"status": "shipped"}')], TOOLS)
    first = reward.grade_turn(blind, 1)
    assert first.breakdown["ok"] == 0.0 and first.score < 1.0 and "error" in first.reason
    retry = reward.grade_turn(blind, 3)
    assert retry.breakdown["fresh"] == 0.0 and "repeats a call that already failed" in retry.reason
    assert retry.score < first.score  # same arguments, same failure: worse than the first try
    assert reward.grade_turn(changed, 3).score == 1.0  # a changed retry that works is fine


def test_a_write_needs_the_users_go_ahead_on_the_values_the_agent_proposed():
    reward = ToolCallingReward()
    agreed = reward.grade_turn(address_conversation("48 Elm Street, Austin 78701"), 5)
    assert agreed.breakdown["consent"] == 1.0
    unasked = reward.grade_turn(address_conversation("48 Elm Street, Austin 78701", user_says_yes=False), 5)
    assert unasked.breakdown["consent"] == 0.0 and "go-ahead" in unasked.reason
    assert unasked.score < agreed.score
    # "No, wait... yes" is not a go-ahead, and a yes to a proposal that named other values covers only those
    conv = address_conversation("48 Elm Street, Austin 78701")
    conv["messages"][4] = user("No, wait. Yes, actually.")
    assert reward.grade_turn(conv, 5).breakdown["consent"] == 0.0
    conv = address_conversation("48 Elm Street, Austin 78701")
    conv["messages"][3] = assistant("I can update the delivery address for you. Shall I go ahead?")
    partial = reward.grade_turn(conv, 5)
    assert partial.breakdown["consent"] == 0.5 and "did not name" in partial.reason


def test_a_reply_claiming_a_change_no_call_made_scores_zero():
    reward = ToolCallingReward()
    ask = [user("Please change the address on NW-1 to 48 Elm Street.")]
    promised = conversation(ask + [assistant("I'll make sure to change the address to 48 Elm Street.")], ADDRESS_TOOLS)
    done = conversation(ask + [assistant("Your address has been updated to 48 Elm Street.")], ADDRESS_TOOLS)
    for conv in (promised, done):
        grade = reward.grade_turn(conv, 1)
        assert grade.applicable and grade.score == 0.0 and grade.breakdown["claims"] == 0.0
    # a claim backed by a write since the user's last message, a proposal that asks first, or a conditional clause
    backed = conversation(ask + [assistant(None, [("update_shipping_address",
                                                   '{"order_id": "NW-1", "address": "48 Elm Street"}')]),
                                 tool("call_0_update_shipping_address", '{"ok": true}'),
                                 assistant("Your address has been updated to 48 Elm Street.")], ADDRESS_TOOLS)
    assert not reward.grade_turn(backed, 3).applicable
    for text in ("I'll change the address to 48 Elm Street. Would you like me to proceed?",
                 "The address cannot be changed once the order has been shipped.",
                 "It has shipped, so refuse the delivery and we'll refund it when it comes back."):
        assert not reward.grade_turn(conversation(ask + [assistant(text)], ADDRESS_TOOLS), 1).applicable
    # with expected calls too, and a write that failed backs nothing
    expected = [{"name": "update_shipping_address", "arguments": {"order_id": "NW-1", "address": "48 Elm Street"}}]
    promised["metadata"]["expected_tool_calls"] = expected
    assert reward.grade_turn(promised, 1).score == 0.0
    failed = json.loads(json.dumps(backed))
    failed["messages"][2] = tool("call_0_update_shipping_address", "Error: order already shipped")
    assert reward.grade_turn(failed, 3).breakdown["claims"] == 0.0


def test_undeclared_and_missing_arguments_fail_the_schema_check():
    reward = ToolCallingReward()
    conv = conversation([user("order A1"), assistant(None, [("get_order", '{"order_id": "A1", "verbose": true}')])],
                        TOOLS)
    grade = reward.grade_turn(conv, 1)
    assert grade.breakdown["schema"] == 1 / 3 and "does not declare: verbose" in grade.reason
    conv["messages"] += [tool("call_0_get_order", '{"status": "shipped"}'), assistant("It has shipped.")]
    conv["metadata"]["expected_tool_calls"] = [{"name": "refund", "arguments": {"order_id": "A1", "amount": 1}}]
    expected_mode = reward.grade_turn(conv, 1)  # a lookup that does not fit its tool counts, even against expected
    assert expected_mode.applicable and expected_mode.score == 0.0


def test_quickstart_holes_answering_without_the_expected_lookup_and_a_claimed_change():
    from pathlib import Path

    samples = Path(__file__).resolve().parents[2] / "kernel" / "stateset_agents" / "samples" / "held_out.jsonl"
    cases = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    reward = ToolCallingReward()
    case = next(c for c in cases if c["metadata"]["scenario"] == "order_status")
    order = case["metadata"]["expected_tool_calls"][0]["arguments"]["order_id"]

    def grade(reply):
        conv = {"id": "held-out", "messages": case["prompt"] + [reply], "tools": case["tools"],
                "metadata": case["metadata"]}
        return reward.grade_turn(conv, len(case["prompt"]))

    looked_up = grade(assistant(None, [("get_order", json.dumps({"order_id": order}))]))
    assert looked_up.score == 1.0
    answered = grade(assistant(f"Your order {order} has shipped and should arrive tomorrow."))
    assert answered.score <= 0.1 and answered.breakdown["lookups"] == 0.0
    address = next(c for c in cases if c["metadata"]["scenario"] == "address_change")
    conv = {"id": "held-out", "tools": address["tools"], "metadata": address["metadata"],
            "messages": address["prompt"] + [assistant("I'll make sure to change the address to 48 Elm Street.")]}
    claimed = reward.grade_turn(conv, len(address["prompt"]))
    assert claimed.score == 0.0 and claimed.breakdown["claims"] == 0.0
    del conv["metadata"]  # without expected calls the claim alone sinks it
    assert reward.grade_turn(conv, len(address["prompt"])).score == 0.0


def test_expected_lookups_count_only_where_no_write_is_expected():
    reward = ToolCallingReward()
    lookup = {"name": "get_order", "arguments": {"order_id": "A1"}}
    write = {"name": "refund", "arguments": {"order_id": "A1", "amount": 250}}
    messages = [user("refund 250 on order A1"), assistant(None, [refund_call({"order_id": "A1", "amount": 250})]),
                tool("call_0_refund", '{"ok": true}'), assistant("Done.")]
    with_write = reward.grade_turn(conversation(messages, TOOLS, expected_tool_calls=[lookup, write]), 3)
    assert with_write.score == 1.0 and "lookups" not in with_write.breakdown  # the write shows what it knew
    only_lookup = conversation([user("where is order A1?"), assistant("It is on its way.")], TOOLS,
                               expected_tool_calls=[lookup])
    assert reward.grade_turn(only_lookup, 1).breakdown["completion"] == 0.0


def test_a_reply_stating_values_no_lookup_returned_costs_conduct_where_writes_are_expected():
    # Expected writes vouch for the calls, not for what the agent tells the user: an answer about an order that was
    # never looked up states a total found nowhere before it, and the final turn's conduct pays for it.
    reward = ToolCallingReward()
    write = {"name": "refund", "arguments": {"order_id": "A1", "amount": 250}}
    lookup = [assistant(None, [("get_order", json.dumps({"order_id": "A1"}))]),
              tool("call_0_get_order", '{"order_id": "A1", "total": 312.40, "placed": "2024-05-02"}')]
    tail = [assistant("Order A1 came to $312.40, placed on May 2. Shall I refund 250?"), user("yes please"),
            assistant(None, [refund_call({"order_id": "A1", "amount": 250})]), tool("call_1_refund", '{"ok": true}'),
            assistant("Done.")]
    looked_up = conversation([user("refund 250 on order A1")] + lookup + tail, TOOLS, expected_tool_calls=[write])
    skipped = conversation([user("refund 250 on order A1")] + tail, TOOLS, expected_tool_calls=[write])
    kept = reward.grade_turn(looked_up, len(looked_up["messages"]) - 1)
    assert kept.score == 1.0 and kept.breakdown["grounded_replies"] == 1.0
    answered = reward.grade_turn(skipped, len(skipped["messages"]) - 1)
    # the write was the expected one; of what the reply told the user, A1 and 250 the user said, 312.40 and May 2
    # came from nowhere: half the reply's values, half the conduct
    assert answered.breakdown["expected_done"] == "1/1" and answered.breakdown["grounded_replies"] == 0.5
    assert answered.score == pytest.approx(1 - CONDUCT_WEIGHT / 2)
    assert "312.4" in answered.reason and "05-02" in answered.reason
    # grounded values earn nothing: they do not dilute another conduct fault (a claim no call made)
    claim = conversation([user("refund 250 on order A1"), assistant("I've refunded 250 on order A1.")], TOOLS,
                         expected_tool_calls=[write])
    claimed = reward.grade_turn(claim, 1)
    assert claimed.breakdown["grounded_replies"] == 1.0 and claimed.score == 0.0


def test_breakdown_keeps_numeric_checks_at_the_top_level_and_the_version_moved():
    reward = ToolCallingReward()
    assert reward.version != "1.0.0"
    for conv, turn in ((address_conversation("48 Elm Street, Austin 78701"), 5),
                       (conversation([user("refund A1"), assistant(None, [refund_call({"order_id": "A1",
                                                                                        "amount": 30})])],
                                     TOOLS, expected_tool_calls=[]), 1)):
        breakdown = reward.grade_turn(conv, turn).breakdown
        numbers = {k: v for k, v in breakdown.items() if isinstance(v, float)}
        assert {"schema", "grounded", "fresh"} <= set(numbers) and isinstance(breakdown["calls"], list)
        assert all(0.0 <= v <= 1.0 for v in numbers.values())


def test_grade_conversation_equals_grading_turn_by_turn_on_real_logs():
    from stateset_agents.core.components import assistant_turns
    from tests.helpers.realdata import tau_log_records

    reward = ToolCallingReward()
    for expected in (True, False):
        for record in tau_log_records(with_expected_calls=expected)[::10]:
            turns = assistant_turns(record)
            assert reward.grade_conversation(record, turns) == [reward.grade_turn(record, t) for t in turns]


# ------------------------------------------------------------------------- metamorphic: broken copies score lower
# Small breakage generators of our own (seeded); `improve audit --robustness` has the product's. None knows how the
# reward works: each makes a copy that is plainly worse, the way a model under RL might.
LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


def _text_before(record, index):
    parts = []
    for message in record["messages"][:index]:
        parts.append(message.get("content") if isinstance(message.get("content"), str) else "")
        parts += [c["function"]["arguments"] or "" for c in message.get("tool_calls") or ()]
    return "\n".join(parts).lower()


def _calls(record, writes_first=True):
    from stateset_plugins.rewards._tools import declared_tools, tool_kind

    declared = declared_tools(record)
    calls = [(i, j, c) for i, m in enumerate(record["messages"]) for j, c in enumerate(m.get("tool_calls") or ())]
    writes = [x for x in calls if tool_kind(x[2]["function"]["name"], declared.get(x[2]["function"]["name"]))
              == "write"]
    return (writes or calls) if writes_first else calls


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, path + (key,))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            yield from _leaves(item, path + (n,))
    elif not isinstance(value, bool) and isinstance(value, (str, int, float)):
        yield path, value


def break_argument(record, rng):
    """One value a call took from the context (an id, a name, a date, an amount) changed to one found nowhere."""
    import copy
    import re

    everything = _text_before(record, len(record["messages"]))
    candidates = []
    for i, j, call in _calls(record):
        arguments = json.loads(call["function"]["arguments"] or "{}")
        before = _text_before(record, i)
        for path, value in _leaves(arguments):
            text = str(value)
            if path and 2 <= len(text) and len(text.split()) <= 4 and text.lower() in before \
                    and not (isinstance(value, int) and abs(value) < 10):
                candidates.append((i, j, path, value))
    for _ in range(20):
        if not candidates:
            return None
        i, j, path, value = rng.choice(candidates)
        new = re.sub(r"\d", lambda m: rng.choice("123456789"), str(value)) if re.search(r"\d", str(value)) else \
            "".join(rng.choice(LETTERS) if c.isalpha() else c for c in str(value))
        if new.lower() in everything:
            continue
        broken = copy.deepcopy(record)
        call = broken["messages"][i]["tool_calls"][j]["function"]
        arguments = json.loads(call["arguments"] or "{}")
        target = arguments
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = type(value)(new) if isinstance(value, (int, float)) else new
        call["arguments"] = json.dumps(arguments)
        return broken
    return None


def rename_call(record, rng):
    """One call (a write where there is one) sent to another declared tool, same arguments."""
    import copy

    calls = _calls(record)
    names = sorted(t["function"]["name"] for t in record["tools"])
    if not calls or len(names) < 2:
        return None
    i, j, call = rng.choice(calls)
    broken = copy.deepcopy(record)
    function = broken["messages"][i]["tool_calls"][j]["function"]
    function["name"] = rng.choice([n for n in names if n != function["name"]])
    return broken


CLAIMS = ("I've {past} your {thing} for you.", "Your {thing} has been {past}.", "Good news: I {past} the {thing}.",
          "The {thing} was {past} successfully.")
CHANGES = (("updated", "reservation"), ("cancelled", "booking"), ("changed", "flight"), ("refunded", "ticket"),
           ("booked", "trip"))


def claim_action(record, rng):
    """A reply made to say a change was done, where no call changed anything since the user's last message."""
    import copy

    from stateset_plugins.rewards._tools import declared_tools, tool_kind

    declared = declared_tools(record)
    messages = record["messages"]
    candidates, changed = [], False
    for index, message in enumerate(messages):
        if message["role"] == "user":
            changed = False
        for call in message.get("tool_calls") or ():
            changed = changed or tool_kind(call["function"]["name"], declared.get(call["function"]["name"])) != "read"
        if message["role"] == "assistant" and isinstance(message.get("content"), str) and message["content"].strip() \
                and not changed and not message.get("tool_calls"):
            candidates.append(index)
    if not candidates:
        return None
    index = rng.choice(candidates)
    past, thing = rng.choice(CHANGES)
    broken = copy.deepcopy(record)
    broken["messages"][index]["content"] += " " + rng.choice(CLAIMS).format(past=past, thing=thing)
    return broken


def _score(reward, record):
    from stateset_agents.core.components import assistant_turns

    scores = [g.score for g in reward.grade_conversation(record, assistant_turns(record)) if g.applicable]
    return round(sum(scores) / len(scores), 9) if scores else 0.5


def win_rate(reward, records, breakage, seed=0):
    """Share of conversations whose original scores strictly above its broken copy (ties count half)."""
    import random

    wins, n = 0.0, 0
    for record in records:
        broken = breakage(record, random.Random(f"{seed}-{record['id']}"))
        if broken is None:
            continue
        original, copy_ = _score(reward, record), _score(reward, broken)
        wins += 1.0 if original > copy_ else 0.5 if original == copy_ else 0.0
        n += 1
    return wins / n, n


def test_broken_copies_of_real_logs_score_lower():
    from tests.helpers.realdata import tau_log_records

    reward = ToolCallingReward()
    for expected in (True, False):
        records = tau_log_records(with_expected_calls=expected)
        for breakage in (break_argument, rename_call, claim_action):
            rate, n = win_rate(reward, records, breakage)
            print(f"\n{breakage.__name__} (expected calls: {expected}): win rate {rate:.3f} over {n}")
            assert n >= 50 and rate >= 0.9, (breakage.__name__, expected, rate)


def _grade_rows(reward, conv):
    turns = [i for i, m in enumerate(conv["messages"]) if m["role"] == "assistant"]
    return [(g.score, g.applicable, json.dumps(g.breakdown, sort_keys=True, default=repr), g.reason)
            for g in reward.grade_conversation(conv, turns)]


def _lookup_conversation(tools):
    return conversation([
        user("Where is order NW-100004?"),
        assistant(None, [("get_order", json.dumps({"order_id": "NW-100004"}))]),
        tool("call_0_get_order", '{"status": "shipped"}'),
        assistant("Order NW-100004 has shipped."),
    ], tools)


def test_what_a_declaration_tells_is_kept_per_declaration_and_graded_alike():
    import copy
    import enum

    class One(enum.IntEnum):
        ONE = 1

    read_only = copy.deepcopy(TOOLS)
    read_only[0]["function"]["annotations"] = {"readOnlyHint": True}
    as_int = copy.deepcopy(read_only)
    as_int[0]["function"]["annotations"] = {"readOnlyHint": 1}  # equal to True, but another declaration
    as_enum = copy.deepcopy(read_only)
    as_enum[0]["function"]["annotations"] = {"readOnlyHint": One.ONE}  # not marshalled: never kept
    as_tuple = copy.deepcopy(TOOLS)
    as_tuple[0]["function"]["parameters"]["required"] = ("order_id",)  # equal bytes in JSON, not a list here
    shared = ToolCallingReward()
    for tools in (TOOLS, copy.deepcopy(TOOLS), read_only, as_int, as_enum, as_tuple, TOOLS):
        conv = _lookup_conversation(tools)
        assert _grade_rows(shared, conv) == _grade_rows(ToolCallingReward(), conv)
    # one entry per distinct declaration (the enum one is never kept), whatever object carries it
    assert len(shared._declarations) == 4


def test_editing_a_graded_conversation_does_not_change_what_was_kept():
    import copy

    tools = copy.deepcopy(TOOLS)
    shared = ToolCallingReward()
    first = _lookup_conversation(tools)
    before = _grade_rows(shared, first)
    tools[0]["function"]["name"] = "lookup_order"  # the caller edits its conversation after grading it
    again = _lookup_conversation(copy.deepcopy(TOOLS))
    assert _grade_rows(shared, again) == before == _grade_rows(ToolCallingReward(), again)
