import copy

import pytest

from reward_builders import assistant, conversation, tool, user
from stateset_agents.errors import InputError
from stateset_plugins.rewards.nsr import NSRReward

SHOP_POLICY = {
    "name": "shop",
    "tools": {"writes": ["refund"], "handoffs": ["transfer"]},
    "constants": {"refund_limit": 100},
    "words": {"affirm": ["yes", "go ahead"], "negate": ["no"], "refusal": ["cannot"]},
    "facts": {"order": "result('get_order', order_id=args.order_id)"},
    "rules": [
        {"id": "confirm-first", "says": "Get a yes before refunding.", "decision": "write",
         "require": "user_confirmed"},
        {"id": "refund-limit", "says": "Refunds up to the limit, on delivered orders.",
         "decision": {"call": "refund"},
         "require": "args.amount <= refund_limit and order.status == 'delivered'", "if_unknown": "broken"},
    ],
}


def refund_conversation(confirmation, amount=50, status="delivered", look_up=True):
    messages = [user("Refund order A1 please.")]
    if look_up:
        messages += [assistant(None, [("get_order", '{"order_id": "A1"}')]),
                     tool("call_0_get_order", f'{{"order_id": "A1", "status": "{status}"}}')]
    messages += [assistant("Refund $50 on A1. Shall I proceed?"), user(confirmation),
                 assistant(None, [("refund", f'{{"order_id": "A1", "amount": {amount}}}')])]
    return conversation(messages)


def test_missing_or_broken_policy_is_a_clear_error():
    with pytest.raises(InputError, match="needs a policy"):
        NSRReward({})
    with pytest.raises(InputError, match="no rules"):
        NSRReward({"policy": {"name": "empty"}})
    bad = copy.deepcopy(SHOP_POLICY)
    bad["rules"][0]["require"] = "__import__('os').system('x')"
    with pytest.raises(InputError):
        NSRReward({"policy": bad})
    yaml_on = copy.deepcopy(SHOP_POLICY)
    yaml_on["rules"][0] = {True: "write", "id": "x", "require": "true"}  # what YAML makes of `on: write`
    with pytest.raises(InputError, match="decision"):
        NSRReward({"policy": yaml_on})


def test_kept_rules_and_reason_names_them():
    conv = refund_conversation("Yes, go ahead.")
    grade = NSRReward({"policy": SHOP_POLICY}).grade_turn(conv, len(conv["messages"]) - 1)
    assert grade.score == 1.0 and "confirm-first" in grade.reason and "refund-limit" in grade.reason


def test_broken_rule_is_named_in_the_reason():
    reward = NSRReward({"policy": SHOP_POLICY})
    unconfirmed = refund_conversation("Hmm, what are my options?")
    grade = reward.grade_turn(unconfirmed, len(unconfirmed["messages"]) - 1)
    assert grade.score == 0.5 and grade.reason.startswith("broke confirm-first")
    said_no = refund_conversation("No, yes... no wait")
    assert reward.grade_turn(said_no, len(said_no["messages"]) - 1).breakdown["confirm-first@refund"] == "broken"
    too_much = refund_conversation("yes", amount=500)
    assert reward.grade_turn(too_much, len(too_much["messages"]) - 1).breakdown["refund-limit@refund"] == "broken"


def test_unknown_facts_follow_if_unknown():
    conv = refund_conversation("yes", look_up=False)  # the order was never looked up
    reward = NSRReward({"policy": SHOP_POLICY})
    assert reward.grade_turn(conv, len(conv["messages"]) - 1).breakdown["refund-limit@refund"] == "broken"
    lenient = copy.deepcopy(SHOP_POLICY)
    lenient["rules"][1]["if_unknown"] = "skip"
    assert "refund-limit@refund" not in NSRReward({"policy": lenient}).grade_turn(
        conv, len(conv["messages"]) - 1).breakdown


def test_turns_without_decisions_are_not_applicable():
    conv = refund_conversation("yes")
    assert not NSRReward({"policy": SHOP_POLICY}).grade_turn(conv, 3).applicable


def test_editing_the_policy_changes_the_verdicts():
    conv = refund_conversation("yes", amount=150)
    turn = len(conv["messages"]) - 1
    assert NSRReward({"policy": SHOP_POLICY}).grade_turn(conv, turn).score == 0.5
    raised = copy.deepcopy(SHOP_POLICY)
    raised["constants"]["refund_limit"] = 200
    assert NSRReward({"policy": raised}).grade_turn(conv, turn).score == 1.0


def test_airline_policy_basic_economy_and_policy_edit(airline_policy):
    reservation = ('{"reservation_id": "R1", "user_id": "u1", "cabin": "basic_economy", "insurance": "no", '
                   '"created_at": "2024-05-01T10:00:00", "flights": [{"flight_number": "HAT1", "date": "2024-05-20"}],'
                   ' "passengers": [{"first_name": "A"}], "total_baggages": 0}')
    conv = conversation([
        user("Change my flight on reservation R1."),
        assistant(None, [("get_reservation_details", '{"reservation_id": "R1"}')]),
        tool("call_0_get_reservation_details", reservation),
        assistant("I will move you to HAT2 on 2024-05-21. Confirm?"), user("Yes"),
        assistant(None, [("update_reservation_flights", '{"reservation_id": "R1", "cabin": "basic_economy", '
                                                        '"flights": [{"flight_number": "HAT2", "date": "2024-05-21"}],'
                                                        ' "payment_id": "credit_card_1"}')]),
    ])
    grade = NSRReward({"policy": airline_policy}).grade_turn(conv, 5)
    assert grade.breakdown["basic-economy-flights-unchanged@update_reservation_flights"] == "broken"
    assert "basic-economy-flights-unchanged" in grade.reason
    assert grade.breakdown["confirm-before-write@update_reservation_flights"] == "kept"
    edited = copy.deepcopy(airline_policy)
    edited["rules"] = [r for r in edited["rules"] if r["id"] != "basic-economy-flights-unchanged"]
    assert "basic-economy-flights-unchanged@update_reservation_flights" not in \
        NSRReward({"policy": edited}).grade_turn(conv, 5).breakdown


def test_real_tau_airline_auc(airline_policy, score_auc):
    from helpers.realdata import tau_log_records

    auc, _ = score_auc(NSRReward({"policy": airline_policy}), tau_log_records(with_expected_calls=False))
    print(f"\nnsr (airline policy) ROC AUC on tau-airline dev: {auc:.3f}")
    # Issue 3's target is 0.8; this guards what the policy reaches today (0.720) so nothing regresses unnoticed.
    assert auc >= 0.71


def test_standing_rules_count_only_when_broken_and_all_kept_scoring():
    policy = copy.deepcopy(SHOP_POLICY)
    policy["rules"].append({"id": "one-call", "says": "One call per turn.", "decision": "tool_call",
                            "require": "turn.tool_calls == 1", "counts": "when_broken"})
    conv = refund_conversation("yes")
    reward = NSRReward({"policy": policy})
    assert not reward.grade_turn(conv, 1).applicable  # a lookup that keeps a standing rule: nothing to judge
    two = conversation([user("hi"), assistant(None, [("get_order", "{}"), ("get_order", "{}")])])
    assert reward.grade_turn(two, 1).breakdown["one-call@get_order"] == "broken"
    over = refund_conversation("yes", amount=500)  # kept confirm-first, broke refund-limit
    assert reward.grade_turn(over, len(over["messages"]) - 1).score == 0.5
    strict = copy.deepcopy(policy)
    strict["scoring"] = "all_kept"
    assert NSRReward({"policy": strict}).grade_turn(over, len(over["messages"]) - 1).score == 0.0
    bad = copy.deepcopy(policy)
    bad["rules"][-1]["counts"] = "sometimes"
    with pytest.raises(InputError, match="counts"):
        NSRReward({"policy": bad})


def _bag_conversation(cabin_change):
    reservation = ('{"reservation_id": "R1", "user_id": "u1", "cabin": "basic_economy", "insurance": "no", '
                   '"created_at": "2024-05-01T10:00:00", "flights": [{"flight_number": "HAT1", "date": "2024-05-20"}],'
                   ' "passengers": [{"first_name": "A"}], "total_baggages": 0}')
    messages = [user("I am u1, reservation R1."),
                assistant(None, [("get_user_details", '{"user_id": "u1"}')]),
                tool("call_0_get_user_details", '{"membership": "gold", "payment_methods": {"credit_card_1": {}}}'),
                assistant(None, [("get_reservation_details", '{"reservation_id": "R1"}')]),
                tool("call_0_get_reservation_details", reservation)]
    if cabin_change:  # the update tool echoes the old cabin: the cabin set by the call is what counts
        messages += [assistant("Upgrade R1 to economy, paid by credit_card_1. Confirm?"), user("yes"),
                     assistant(None, [("update_reservation_flights", '{"reservation_id": "R1", "cabin": "economy", '
                                       '"flights": [{"flight_number": "HAT1", "date": "2024-05-20"}], '
                                       '"payment_id": "credit_card_1"}')]),
                     tool("call_0_update_reservation_flights", reservation)]
    messages += [assistant("Add 3 bags to R1, 0 of them paid. Confirm?"), user("yes"),
                 assistant(None, [("update_reservation_baggages", '{"reservation_id": "R1", "total_baggages": 3, '
                                   '"nonfree_baggages": 0, "payment_id": "credit_card_1"}')])]
    return conversation(messages)


def test_airline_added_bag_fees_follow_the_cabin_the_agent_set_and_the_policy_table(airline_policy):
    reward = NSRReward({"policy": airline_policy})
    key = "added-bag-fees@update_reservation_baggages"
    upgraded = _bag_conversation(cabin_change=True)  # gold economy: 3 free bags
    assert reward.grade_turn(upgraded, len(upgraded["messages"]) - 1).breakdown[key] == "kept"
    basic = _bag_conversation(cabin_change=False)  # gold basic economy: 2 free bags, so 1 is paid
    assert reward.grade_turn(basic, len(basic["messages"]) - 1).breakdown[key] == "broken"
    edited = copy.deepcopy(airline_policy)
    edited["constants"]["free_bags"]["gold"]["basic_economy"] = 3  # editing the allowance table changes the verdict
    assert NSRReward({"policy": edited}).grade_turn(basic, len(basic["messages"]) - 1).breakdown[key] == "kept"


def test_airline_flight_change_payment_and_make_sure_is_not_a_yes(airline_policy):
    conv = _bag_conversation(cabin_change=True)
    messages = conv["messages"][:6] + [user("Could you make sure it is the cheapest?"),
                                       conv["messages"][7]]
    grade = NSRReward({"policy": airline_policy}).grade_turn(conversation(messages), 7)
    assert grade.breakdown["confirm-before-write@update_reservation_flights"] == "broken"
    assert grade.breakdown["flight-change-paid-by-card@update_reservation_flights"] == "kept"
    assert grade.score == 0.0  # all_kept: one broken rule and the decision does not comply
