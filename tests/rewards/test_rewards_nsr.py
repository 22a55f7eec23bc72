import copy

import pytest

from stateset_agents.core.errors import InputError
from stateset_plugins.rewards.nsr import NSRReward
from tests.rewards.reward_builders import assistant, conversation, tool, user

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


def _verdicts(breakdown):
    """The breakdown's `rule@decision` verdicts (without the per-rule numbers beside them)."""
    return {k: v for k, v in breakdown.items() if "@" in k}


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
    from tests.helpers.realdata import tau_log_records

    auc, _ = score_auc(NSRReward({"policy": airline_policy}), tau_log_records(with_expected_calls=False))
    print(f"\nnsr (airline policy) ROC AUC on tau-airline dev: {auc:.3f}")
    # Policy 1.5 measured 0.796 (task-clustered 95% interval 0.70-0.87; 1.4: 0.787; 1.3 with all_kept: 0.801).
    # Issue 13's target is 0.85, not met: docs/rewards.md says why. The scoring is the one the folds choose (next
    # test).
    assert auc >= 0.77


def test_real_tau_airline_scoring_is_chosen_out_of_fold(airline_policy, score_auc):
    """The scoring rule is a fitted choice: chosen on the training folds (grouped by task, stratified so that each
    holds successes), judged on the held-out fold. The pooled out-of-fold AUC is the figure docs/rewards.md shows."""
    from stateset_agents.plugin_api.stats import grouped_stratified_folds, out_of_fold_auc, roc_auc
    from tests.helpers.realdata import tau_labels, tau_log_records

    records, labels = tau_log_records(with_expected_calls=False), tau_labels()
    ids = sorted(r["id"] for r in records)
    by_scoring = {}
    for scoring in ("all_kept", "kept_share", "per_breach"):
        policy = {**airline_policy, "scoring": scoring}
        by_scoring[scoring] = score_auc(NSRReward({"policy": policy}), records)[1]
    y = [labels[i] for i in ids]
    folds = grouped_stratified_folds([i.split("-")[1] for i in ids], y, 5, seed=0)
    oof, chosen = [0.0] * len(ids), set()
    for fold in range(5):
        train = [n for n in range(len(ids)) if folds[n] != fold]
        best = max(by_scoring, key=lambda s: roc_auc([by_scoring[s][ids[n]] for n in train], [y[n] for n in train]))
        chosen.add(best)
        for n in range(len(ids)):
            if folds[n] == fold:
                oof[n] = by_scoring[best][ids[n]]
    pooled = out_of_fold_auc(oof, y, folds)["pooled"]
    print(f"\nnsr scoring chosen in each fold: {sorted(chosen)}; pooled out-of-fold AUC {pooled:.3f}")
    assert chosen == {airline_policy["scoring"]}  # the shipped scoring is the one every fold chooses
    assert pooled >= 0.77  # measured 0.796 (policy 1.5)


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
    broken = [k for k, v in grade.breakdown.items() if "@" in k and v == "broken"]
    assert grade.score == 0.5 ** len(broken) < 1  # per_breach: each broken rule halves the turn's score


# --------------------------------------------------------------------------- facts from earlier tool results

def _evaluate(source, names=None, functions=None):
    from stateset_plugins.rewards.policy_language import UNKNOWN, Evaluator, compile_expression

    names = names or {}
    evaluator = Evaluator(lambda n: names.get(n, UNKNOWN), functions or {})
    return evaluator.evaluate(compile_expression(source, "test"))


def test_language_comprehensions_quantifiers_and_list_lookups():
    from stateset_plugins.rewards.policy_language import UNKNOWN, compile_expression

    items = [{"id": "A", "n": 1}, {"id": "b", "n": 2}, {"n": 3}]
    assert _evaluate("[x.n * 2 for x in items if x.n > 1]", {"items": items}) == [4, 6]
    assert _evaluate("all(x.n > 0 for x in items)", {"items": items}) is True
    assert _evaluate("any(x.n > 2 for x in items)", {"items": items}) is True
    # Kleene: a false item settles all(); otherwise an unknown one (a missing field) leaves it unknown
    assert _evaluate("all(x.id == 'A' for x in items)", {"items": items}) is False
    assert _evaluate("all(x.id != 'z' for x in items)", {"items": items}) is UNKNOWN
    assert _evaluate("any(x.id == 'z' for x in items)", {"items": items}) is UNKNOWN
    assert _evaluate("all(x > 0 for x in missing)") is UNKNOWN  # an unknown list stays unknown
    assert _evaluate("find(items, id='B').n", {"items": items}) == 2  # strings compare case-insensitively
    assert _evaluate("find(items, id='z')", {"items": items}) is UNKNOWN
    assert _evaluate("len(where(items, n=3))", {"items": items}) == 1
    assert _evaluate("flatten([[1, [2]], 3])") == [1, 2, 3]
    # the loop variable is local: outside the comprehension the name is a fact again
    assert _evaluate("[x for x in [1, 2]] + [x]", {"x": 9}) == [1, 2, 9]
    for bad in ("[x for x in a for y in b]", "[(x, y) for x, y in a]", "[x for x in a if (y := 1)]"):
        with pytest.raises(InputError):
            compile_expression(bad, "test")


SEARCH_POLICY = {
    "name": "search",
    "tools": {"writes": ["book"]},
    "facts": {"seen_items": "records_of('search')",
              "picked": "find(seen_items, item=args.item, day=args.day)"},
    "rules": [{"id": "book-available", "says": "Book only what a search showed as open.", "decision": {"call": "book"},
               "require": "picked.status == 'open'", "if_unknown": "broken"},
              {"id": "all-results", "says": "counts searches", "decision": {"call": "book"},
               "require": "len(results_of('search')) == args.searches"}],
}


def _search_conversation(status="open", day="mon", searched=True, searches=1, failed_search=False):
    messages = [user("Book item X on mon.")]
    if failed_search:
        messages += [assistant(None, [("search", '{"day": "mon"}')]), tool("call_0_search", "Error: busy")]
    if searched:  # the result lists records without their day: the call's argument supplies it
        messages += [assistant(None, [("search", '{"day": "mon"}')]),
                     tool("call_0_search", f'[[{{"item": "X", "status": "{status}"}}], [{{"item": "Y"}}]]')]
    messages += [assistant(None, [("book", f'{{"item": "x", "day": "{day}", "searches": {searches}}}')])]
    return conversation(messages)


def test_records_of_earlier_results_carry_their_call_arguments_and_skip_failed_calls():
    reward = NSRReward({"policy": SEARCH_POLICY})

    def verdicts(conv):
        return _verdicts(reward.grade_turn(conv, len(conv["messages"]) - 1).breakdown)

    assert verdicts(_search_conversation()) == {"book-available@book": "kept", "all-results@book": "kept"}
    assert verdicts(_search_conversation(status="full"))["book-available@book"] == "broken"
    assert verdicts(_search_conversation(day="tue"))["book-available@book"] == "broken"  # not what was searched
    assert verdicts(_search_conversation(searched=False))["book-available@book"] == "broken"  # never looked
    failed = verdicts(_search_conversation(failed_search=True, searches=1))  # the error result establishes nothing
    assert failed == {"book-available@book": "kept", "all-results@book": "kept"}
    edited = copy.deepcopy(SEARCH_POLICY)
    edited["rules"][0]["require"] = "picked.status in ['open', 'full']"
    conv = _search_conversation(status="full")
    assert NSRReward({"policy": edited}).grade_turn(conv, len(conv["messages"]) - 1).breakdown[
        "book-available@book"] == "kept"


def test_turn_matches_and_seen_check_stated_facts_against_earlier_results():
    policy = {"name": "facts", "words": {}, "constants": {"code": r"\b[A-Z]{2}\d{2}\b"},
              "rules": [{"id": "no-made-up-codes", "says": "State only codes the tools or the user gave.",
                         "decision": "turn", "when": "len(turn_matches(code)) > 0",
                         "require": "all(seen(c) for c in turn_matches(code))", "counts": "when_broken"}]}
    base = [user("Which codes do I have? Mine is QQ77."), assistant(None, [("lookup", "{}")]),
            tool("call_0_lookup", '{"codes": ["AB12"]}')]
    reward = NSRReward({"policy": policy})
    honest = conversation(base + [assistant("You have AB12 and QQ77.")])
    assert not reward.grade_turn(honest, 3).applicable  # kept standing rule: nothing to judge
    invented = conversation(base + [assistant("You have AB12 and ZZ99.")])
    grade = reward.grade_turn(invented, 3)
    assert grade.breakdown["no-made-up-codes@turn"] == "broken" and grade.score == 0.0
    bad = copy.deepcopy(policy)
    bad["constants"]["code"] = "("
    with pytest.raises(InputError, match="regular expression"):
        NSRReward({"policy": bad}).grade_turn(invented, 3)


# ---------------------------------------------------------------------------------- airline: result-joined rules

_PROFILE = ('{"name": {"first_name": "Ann", "last_name": "Lee"}, "dob": "1990-01-01", "membership": "gold", '
            '"payment_methods": {"credit_card_1": {}}, "reservations": ["R1"], '
            '"saved_passengers": [{"first_name": "Bo", "last_name": "Lee", "dob": "1991-02-02"}]}')
_RESERVATION = ('{"reservation_id": "R1", "user_id": "u1", "origin": "AAA", "destination": "CCC", '
                '"flight_type": "one_way", "cabin": "economy", "insurance": "no", "created_at": "2024-05-01T10:00:00", '
                '"flights": [{"origin": "AAA", "destination": "BBB", "flight_number": "HAT001", "date": "2024-05-20"}, '
                '{"origin": "BBB", "destination": "CCC", "flight_number": "HAT002", "date": "2024-05-20"}], '
                '"passengers": [{"first_name": "Ann", "last_name": "Lee", "dob": "1990-01-01"}], "total_baggages": 0}')


def _direct(flight, origin, destination, status="available", seats=5):
    return (f'{{"flight_number": "{flight}", "origin": "{origin}", "destination": "{destination}", '
            f'"status": "{status}", "available_seats": {{"economy": {seats}}}, "prices": {{"economy": 100}}}}')


def _change_conversation(new_flights, search=None, profile=_PROFILE, look_up_profile=True):
    """A flight change on R1 (AAA->CCC one way); `search` is (origin, destination, [records]) or None."""
    messages = [user("I am u1. Change reservation R1 please.")]
    if look_up_profile:
        messages += [assistant(None, [("get_user_details", '{"user_id": "u1"}')]),
                     tool("call_0_get_user_details", profile)]
    messages += [assistant(None, [("get_reservation_details", '{"reservation_id": "R1"}')]),
                 tool("call_0_get_reservation_details", _RESERVATION)]
    if search:
        origin, destination, records = search
        messages += [assistant(None, [("search_direct_flight",
                                       f'{{"origin": "{origin}", "destination": "{destination}", "date": "2024-05-21"}}')]),
                     tool("call_0_search_direct_flight", "[" + ", ".join(records) + "]")]
    flights = ", ".join(f'{{"flight_number": "{n}", "date": "{d}"}}' for n, d in new_flights)
    messages += [assistant("Change R1 to these flights, paid by credit_card_1. Confirm?"), user("yes"),
                 assistant(None, [("update_reservation_flights", f'{{"reservation_id": "R1", "cabin": "economy", '
                                   f'"flights": [{flights}], "payment_id": "credit_card_1"}}')])]
    return conversation(messages)


def _breakdown(policy, conv):
    return NSRReward({"policy": policy}).grade_turn(conv, len(conv["messages"]) - 1).breakdown


def test_airline_flight_change_keeps_origin_destination_and_trip_type(airline_policy):
    key = "flight-change-keeps-route@update_reservation_flights"
    same_route = _change_conversation([("HAT009", "2024-05-21")], search=("AAA", "CCC", [_direct("HAT009", "AAA", "CCC")]))
    assert _breakdown(airline_policy, same_route)[key] == "kept"
    # one kept segment (from the reservation) plus one new one still ends where the trip ends
    partial = _change_conversation([("HAT001", "2024-05-20"), ("HAT008", "2024-05-21")],
                                   search=("BBB", "CCC", [_direct("HAT008", "BBB", "CCC")]))
    assert _breakdown(airline_policy, partial)[key] == "kept"
    elsewhere = _change_conversation([("HAT009", "2024-05-21")], search=("AAA", "DDD", [_direct("HAT009", "AAA", "DDD")]))
    assert _breakdown(airline_policy, elsewhere)[key] == "broken"
    edited = copy.deepcopy(airline_policy)
    edited["rules"] = [r for r in edited["rules"] if r["id"] != "flight-change-keeps-route"]
    # the edit takes away exactly that verdict, and changes no other
    assert _breakdown(edited, elsewhere) == {k: v for k, v in _breakdown(airline_policy, elsewhere).items()
                                             if k not in (key, key.split("@")[0])}


def test_airline_books_only_available_flights_with_seats_the_agent_saw(airline_policy):
    key = "book-available-flights@update_reservation_flights"
    seats = "seats-for-every-passenger@update_reservation_flights"
    good = _change_conversation([("HAT009", "2024-05-21")], search=("AAA", "CCC", [_direct("HAT009", "AAA", "CCC")]))
    assert _breakdown(airline_policy, good)[key] == "kept" and _breakdown(airline_policy, good)[seats] == "kept"
    delayed = _change_conversation([("HAT009", "2024-05-21")],
                                   search=("AAA", "CCC", [_direct("HAT009", "AAA", "CCC", status="delayed")]))
    assert _breakdown(airline_policy, delayed)[key] == "broken"
    unseen = _change_conversation([("HAT009", "2024-05-21")])  # never searched: the agent did not check
    assert _breakdown(airline_policy, unseen)[key] == "broken"
    wrong_day = _change_conversation([("HAT009", "2024-05-22")], search=("AAA", "CCC", [_direct("HAT009", "AAA", "CCC")]))
    assert _breakdown(airline_policy, wrong_day)[key] == "broken"  # the search was for another date
    kept_segments = _change_conversation([("HAT001", "2024-05-20"), ("HAT002", "2024-05-20")])
    assert _breakdown(airline_policy, kept_segments)[key] == "kept"  # segments the reservation holds need no search
    full = _change_conversation([("HAT009", "2024-05-21")],
                                search=("AAA", "CCC", [_direct("HAT009", "AAA", "CCC", seats=0)]))
    assert _breakdown(airline_policy, full)[seats] == "broken"
    edited = copy.deepcopy(airline_policy)
    rule = next(r for r in edited["rules"] if r["id"] == "book-available-flights")
    rule["require"] = rule["require"].replace("== 'available'", "in ['available', 'delayed']")
    assert _breakdown(edited, delayed)[key] == "kept"


def test_airline_acts_only_on_the_users_own_reservation(airline_policy):
    key = "act-on-the-users-own-reservation@update_reservation_flights"
    flights = [("HAT001", "2024-05-20"), ("HAT002", "2024-05-20")]
    assert _breakdown(airline_policy, _change_conversation(flights))[key] == "kept"
    not_listed = _PROFILE.replace('"reservations": ["R1"]', '"reservations": ["R9"]')
    assert _breakdown(airline_policy, _change_conversation(flights, profile=not_listed))[key] == "broken"
    # no profile lookup: the user stated the id that owns the reservation ("I am u1")
    assert _breakdown(airline_policy, _change_conversation(flights, look_up_profile=False))[key] == "kept"
    stranger = _change_conversation(flights, look_up_profile=False)
    stranger["messages"][0] = user("Change reservation R1 please.")
    assert _breakdown(airline_policy, stranger)[key] == "broken"


def _booking(passengers, searched=True):
    messages = [user("I am u1, book HAT009 on 2024-05-21 for me."),
                assistant(None, [("get_user_details", '{"user_id": "u1"}')]),
                tool("call_0_get_user_details", _PROFILE)]
    if searched:
        messages += [assistant(None, [("search_direct_flight",
                                       '{"origin": "AAA", "destination": "CCC", "date": "2024-05-21"}')]),
                     tool("call_0_search_direct_flight", "[" + _direct("HAT009", "AAA", "CCC") + "]")]
    people = ", ".join(f'{{"first_name": "{f}", "last_name": "{l}", "dob": "2000-01-01"}}' for f, l in passengers)
    messages += [assistant("Do you want travel insurance? Booking HAT009. Confirm?"), user("No insurance. Yes."),
                 assistant(None, [("book_reservation", '{"user_id": "u1", "origin": "AAA", "destination": "CCC", '
                                   '"flight_type": "one_way", "cabin": "economy", "flights": [{"flight_number": '
                                   f'"HAT009", "date": "2024-05-21"}}], "passengers": [{people}], "payment_methods": '
                                   '[{"payment_id": "credit_card_1", "amount": 100}], "total_baggages": 0, '
                                   '"nonfree_baggages": 0, "insurance": "no"}')])]
    return conversation(messages)


def test_airline_passenger_details_come_from_the_user_or_the_profile(airline_policy):
    key = "passenger-details-from-user-or-profile@book_reservation"
    assert _breakdown(airline_policy, _booking([("Ann", "Lee"), ("Bo", "Lee")]))[key] == "kept"
    assert _breakdown(airline_policy, _booking([("Cy", "Moe")]))[key] == "broken"  # neither said nor in the profile
    said = _booking([("Cy", "Moe")])
    said["messages"][0] = user("I am u1, book HAT009 on 2024-05-21 for Cy Moe.")
    assert _breakdown(airline_policy, said)[key] == "kept"
    assert _breakdown(airline_policy, _booking([("Ann", "Lee")], searched=False))[
        "book-available-flights@book_reservation"] == "broken"


def _certificate(complaint, amount, passengers=2):
    reservation = _RESERVATION.replace('"passengers": [{"first_name": "Ann", "last_name": "Lee", "dob": "1990-01-01"}]',
                                       '"passengers": [' + ", ".join(['{"first_name": "P"}'] * passengers) + "]")
    return conversation([
        user(f"I am u1. {complaint} I want compensation."),
        assistant(None, [("get_user_details", '{"user_id": "u1"}')]), tool("call_0_get_user_details", _PROFILE),
        assistant(None, [("get_reservation_details", '{"reservation_id": "R1"}')]),
        tool("call_0_get_reservation_details", reservation),
        assistant(f"I can send a ${amount} certificate. Confirm?"), user("yes"),
        assistant(None, [("send_certificate", f'{{"user_id": "u1", "amount": {amount}}}')])])


def test_airline_delayed_flight_compensation_is_fifty_per_passenger(airline_policy):
    key = "compensation-amount@send_certificate"
    assert _breakdown(airline_policy, _certificate("My flight was delayed.", 100))[key] == "kept"
    assert _breakdown(airline_policy, _certificate("My flight was delayed.", 150))[key] == "broken"
    assert _breakdown(airline_policy, _certificate("My flight was cancelled by the airline.", 200))[key] == "kept"
    assert _breakdown(airline_policy, _certificate("My flight was cancelled by the airline.", 300))[key] == "broken"


def test_airline_flights_the_agent_names_come_from_tools_or_the_user(airline_policy):
    conv = _change_conversation([("HAT009", "2024-05-21")], search=("AAA", "CCC", [_direct("HAT009", "AAA", "CCC")]))
    messages = conv["messages"][:-3]
    reward = NSRReward({"policy": airline_policy})
    named = conversation(messages + [assistant("HAT009 is available on 2024-05-21.")])
    assert not reward.grade_turn(named, len(messages)).applicable
    invented = conversation(messages + [assistant("HAT777 is available on 2024-05-21.")])
    assert reward.grade_turn(invented, len(messages)).breakdown["flights-stated-come-from-tools@turn"] == "broken"


_SAME_FLIGHTS = [("HAT001", "2024-05-20"), ("HAT002", "2024-05-20")]
_PAYMENT = "payment-method-chosen-by-user@update_reservation_flights"


def _with_messages(conv, before_last=(), listing=None):
    """The conversation with `before_last` inserted before the agent's listing, or the listing's text replaced."""
    messages = list(conv["messages"])
    if listing is not None:
        messages[-3] = assistant(listing)
    return conversation(messages[:-3] + list(before_last) + messages[-3:])


def test_airline_payment_method_is_the_users_choice_not_the_agents(airline_policy):
    chosen_by_agent = _change_conversation(_SAME_FLIGHTS)  # the agent picked credit_card_1 and named only its id
    assert _breakdown(airline_policy, chosen_by_agent)[_PAYMENT] == "broken"
    named_by_user = _with_messages(chosen_by_agent, [user("Please charge my credit card."),
                                                     assistant("Certainly.")])
    assert _breakdown(airline_policy, named_by_user)[_PAYMENT] == "kept"
    in_the_confirmed_details = _with_messages(
        chosen_by_agent, listing="Change R1 to these flights; the difference goes on your credit card. Confirm?")
    assert _breakdown(airline_policy, in_the_confirmed_details)[_PAYMENT] == "kept"
    # per_breach scoring: that rule's breach halves the turn's score, and without the rule the score doubles
    turn = len(chosen_by_agent["messages"]) - 1
    score = NSRReward({"policy": airline_policy}).grade_turn(chosen_by_agent, turn).score
    assert score <= 0.5
    edited = copy.deepcopy(airline_policy)
    edited["rules"] = [r for r in edited["rules"] if r["id"] != "payment-method-chosen-by-user"]
    assert NSRReward({"policy": edited}).grade_turn(chosen_by_agent, turn).score == 2 * score


def _passenger_request(request, reply):
    return conversation([user("I am u1, reservation R1."),
                         assistant(None, [("get_reservation_details", '{"reservation_id": "R1"}')]),
                         tool("call_0_get_reservation_details", _RESERVATION), assistant("Found it."),
                         user(request), assistant(reply)])


def test_airline_refusing_a_passenger_change_is_grounded_only_for_the_number_of_passengers(airline_policy):
    key = "passenger-change-refusal-grounded@refusal"
    wrong = _passenger_request("Please change the passenger to my wife, Mia Lee.",
                               "Unfortunately, passengers on a reservation cannot be changed.")
    assert _breakdown(airline_policy, wrong)[key] == "broken"
    right = _passenger_request("Can you add a passenger, my son, to R1?",
                               "Unfortunately, the number of passengers cannot change.")
    assert _breakdown(airline_policy, right)[key] == "kept"


def test_language_expressions_may_span_lines_and_agent_said_last_reads_the_latest_reply():
    assert _evaluate("1 if x\n  else 2", {"x": False}) == 2
    conv = conversation([user("hi"), assistant("We can use your gift card."), user("ok"),
                         assistant(None, [("get_x", "{}")]), tool("call_0_get_x", "{}"),
                         assistant(None, [("do_x", "{}")])])
    policy = copy.deepcopy(SHOP_POLICY)
    policy["words"]["gift"] = ["gift card"]
    policy["tools"]["writes"] = ["do_x"]
    policy["rules"] = [{"id": "gift", "says": "The agent last spoke of the gift card.", "decision": "write",
                        "require": "agent_said_last('gift')"}]
    assert _verdicts(NSRReward({"policy": policy}).grade_turn(conv, 5).breakdown) == {"gift@do_x": "kept"}


def test_user_said_last_and_user_confirmed_read_the_latest_user_message_even_without_text():
    # The user's yes, then a message with no text: that latest message is no go-ahead (the agent's turns without
    # text are skipped by agent_said_last, the user's are not).
    policy = copy.deepcopy(SHOP_POLICY)
    policy["rules"].append({"id": "said-yes-last", "decision": "write", "require": "user_said_last('affirm')"})
    reward = NSRReward({"policy": policy})
    for blank in ("", None, "  "):
        conv = refund_conversation("yes")
        conv["messages"][-1:-1] = [assistant("Refunding now."), user(blank)]
        breakdown = reward.grade_turn(conv, len(conv["messages"]) - 1).breakdown
        assert breakdown["confirm-first@refund"] == "broken" and breakdown["said-yes-last@refund"] == "broken"
    conv = refund_conversation("yes")
    breakdown = reward.grade_turn(conv, len(conv["messages"]) - 1).breakdown
    assert breakdown["confirm-first@refund"] == "kept" and breakdown["said-yes-last@refund"] == "kept"


def test_phrase_functions_take_a_list_as_no_phrase_and_keep_only_word_list_expansions():
    policy = copy.deepcopy(SHOP_POLICY)
    policy["words"]["thanks"] = ["thank you"]
    policy["rules"] = [{"id": "list", "decision": "write",
                        "require": "not user_said(['yes']) and not turn_says(['x']) and user_said('thanks')"},
                       {"id": "named", "decision": "write", "require": "user_said(args.name)"}]
    reward = NSRReward({"policy": policy})
    for name in ("Ann", "Bo", "Cy"):
        conv = conversation([user(f"yes, thank you, I am {name}"),
                             assistant(None, [("refund", f'{{"order_id": "A1", "name": "{name}"}}')])])
        # a list argument names no phrase (as before the expansions were kept): false, not unknown
        assert _verdicts(reward.grade_turn(conv, 1).breakdown) == {"list@refund": "kept", "named@refund": "kept"}
    # only the word-list names are kept, not every name a conversation brought
    assert set(reward._contexts.context._expanded) == {("thanks",)}
