import json

from reward_builders import assistant, conversation, tool, user
from stateset_plugins.rewards.tool_calling import CONDUCT_WEIGHT, ToolCallingReward

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
    from helpers.realdata import tau_log_records

    reward = ToolCallingReward()
    with_expected, _ = score_auc(reward, tau_log_records(with_expected_calls=True))
    without_expected, _ = score_auc(reward, tau_log_records(with_expected_calls=False))
    print(f"\ntool_calling ROC AUC on tau-airline dev: with expected calls {with_expected:.3f}, "
          f"without {without_expected:.3f} (no threshold)")
    assert with_expected >= 0.9
