"""nsr policy 1.4: the language constructs it added (each with a small policy of its own) and each new airline rule,
with a conversation that breaks it (the assertion fails without the rule) and one that keeps it."""
import copy
import json
from pathlib import Path

import pytest
import yaml

from stateset_agents.core.errors import InputError
from stateset_plugins.rewards.nsr import NSRReward
from tests.rewards.reward_builders import assistant, conversation, tool, user
from tests.rewards.test_rewards_nsr import (_SAME_FLIGHTS, _booking, _breakdown, _certificate, _change_conversation,
                                            _direct, _evaluate, _passenger_request, _verdicts, _with_messages)

SHOP = {
    "name": "shop", "scoring": "per_breach",
    "tools": {"writes": ["refund"]},
    "constants": {"limit": 100, "code": "[A-Z]{2}[0-9]{2}"},
    "words": {"affirm": ["yes"], "negate": ["no"], "asks": ["shall i"]},
    "facts": {"over": "args.amount > limit"},
    "rules": [
        {"id": "under-limit", "decision": {"call": "refund"}, "require": "not over"},
        {"id": "accepted", "decision": "write", "require": "not call_failed"},
        {"id": "codes-seen", "decision": "write", "require": "all(seen(v) for v in leaves(args) if like(v, code))"},
    ],
}


def _refund(arguments='{"order": "AB12", "amount": 50}', answer='{"ok": true}', first_user="Refund AB12 please."):
    messages = [user(first_user), assistant(None, [("refund", arguments)])]
    if answer is not None:
        messages.append(tool("call_0_refund", answer))
    return conversation(messages)


# ------------------------------------------------------------------------------------------ language constructs

def test_leaves_and_like():
    args = {"order": "AB12", "items": [{"sku": "CD34", "n": 2}], "note": None}
    assert _evaluate("leaves(a)", {"a": args}) == ["AB12", "CD34", 2]
    assert _evaluate("[v for v in leaves(a) if like(v, '[A-Z]{2}[0-9]{2}')]", {"a": args}) == ["AB12", "CD34"]
    assert _evaluate("like('AB123', '[A-Z]{2}[0-9]{2}')") is False  # the whole value must match
    assert _evaluate("like(5, '5')") is False  # only text matches a pattern
    bad = copy.deepcopy(SHOP)
    bad["constants"]["code"] = "("
    with pytest.raises(InputError, match="regular expression"):
        NSRReward({"policy": bad}).grade_turn(_refund(), 1)


def test_call_failed_reads_the_calls_own_result():
    reward = NSRReward({"policy": SHOP})
    assert _verdicts(reward.grade_turn(_refund(), 1).breakdown)["accepted@refund"] == "kept"
    rejected = reward.grade_turn(_refund(answer="Error: order not found"), 1)
    assert rejected.breakdown["accepted@refund"] == "broken"
    assert "accepted@refund" not in reward.grade_turn(_refund(answer=None), 1).breakdown  # no answer: unknown


def test_seen_identifiers_in_arguments():
    reward = NSRReward({"policy": SHOP})
    assert reward.grade_turn(_refund(), 1).breakdown["codes-seen@refund"] == "kept"
    made_up = reward.grade_turn(_refund(arguments='{"order": "ZZ99", "amount": 50}'), 1)
    assert made_up.breakdown["codes-seen@refund"] == "broken"


def test_per_breach_scoring_and_numbers_at_the_top_of_the_breakdown():
    reward = NSRReward({"policy": SHOP})
    clean = reward.grade_turn(_refund(), 1)
    assert clean.score == 1.0 and clean.breakdown["under-limit"] == 1.0
    twice = reward.grade_turn(_refund(arguments='{"order": "ZZ99", "amount": 500}'), 1)
    assert twice.score == 0.25  # two breaches, each halves the score
    assert twice.breakdown["under-limit"] == 0.0 and twice.breakdown["codes-seen"] == 0.0
    assert twice.breakdown["accepted"] == 1.0
    numbers = {k: v for k, v in twice.breakdown.items() if "@" not in k}
    assert set(numbers) == {"under-limit", "accepted", "codes-seen"} and all(0 <= v <= 1 for v in numbers.values())
    quarter = {**SHOP, "breach_factor": 0.25}
    assert NSRReward({"policy": quarter}).grade_turn(_refund(arguments='{"order": "ZZ99", "amount": 500}'),
                                                     1).score == 0.0625
    for bad in ({"breach_factor": 1}, {"breach_factor": 0}, {"breach_factor": True}, {"scoring": "mean"}):
        with pytest.raises(InputError, match="breach_factor|scoring"):
            NSRReward({"policy": {**SHOP, **bad}})


def test_facts_follow_each_decision_of_a_turn():
    # Two refunds in one turn: `over` is evaluated for each call's own arguments (facts are kept per decision).
    conv = conversation([user("Refund AB12 and CD34."),
                         assistant(None, [("refund", '{"order": "AB12", "amount": 50}'),
                                          ("refund", '{"order": "AB12", "amount": 500}')])])
    grade = NSRReward({"policy": SHOP}).grade_turn(conv, 1)
    assert grade.breakdown["under-limit"] == 0.0 and grade.score == 0.5  # one call over the limit, one under


def test_calls_since_user_counts_what_the_agent_did_with_the_users_last_words():
    policy = copy.deepcopy(SHOP)
    policy["rules"] = [{"id": "acted", "decision": "turn", "when": "turn.has_text and user_confirmed",
                        "require": "calls_since_user() > 0 and calls_since_user('refund') == 1"}]
    reward = NSRReward({"policy": policy})
    stopped = conversation([user("Refund AB12."), assistant("Shall I refund AB12?"), user("yes"),
                            assistant("Done, refunded!")])
    assert reward.grade_turn(stopped, 3).breakdown["acted@turn"] == "broken"
    acted = conversation([user("Refund AB12."), assistant("Shall I refund AB12?"), user("yes"),
                          assistant(None, [("refund", '{"order": "AB12", "amount": 5}')]), tool("call_0_refund", "{}"),
                          assistant("Done, refunded!")])
    assert reward.grade_turn(acted, 5).breakdown["acted@turn"] == "kept"


def test_calls_since_user_can_count_only_calls_that_took_effect_and_reply_rules_judge_turns_with_text():
    policy = copy.deepcopy(SHOP)
    policy["words"]["done"] = ["refunded"]
    policy["rules"] = [{"id": "backed", "decision": "reply", "when": "turn_says('done')",
                        "require": "calls_since_user('refund', succeeded=true) > 0"}]
    reward = NSRReward({"policy": policy})
    failed = conversation([user("Refund AB12."), assistant(None, [("refund", '{"order": "AB12", "amount": 5}')]),
                           tool("call_0_refund", "Error: no such order"), assistant("Refunded!")])
    assert reward.grade_turn(failed, 3).breakdown["backed@turn"] == "broken"  # the call was made, nothing done
    worked = copy.deepcopy(failed)
    worked["messages"][2] = tool("call_0_refund", '{"ok": true}')
    assert reward.grade_turn(worked, 3).breakdown["backed@turn"] == "kept"
    # a turn without text is no reply: the rule is not even a candidate
    assert not reward.grade_turn(worked, 1).applicable
    with pytest.raises(InputError, match="decision"):
        NSRReward({"policy": {**policy, "rules": [{"id": "x", "decision": "replies", "require": "true"}]}})


def test_call_repeated_is_the_same_tool_with_the_same_arguments_again():
    policy = copy.deepcopy(SHOP)
    policy["rules"] = [{"id": "once", "decision": "write", "require": "not call_repeated"}]
    reward = NSRReward({"policy": policy})
    call = ("refund", '{"order": "AB12", "amount": 5}')
    twice = conversation([user("Refund AB12."), assistant(None, [call]), tool("call_0_refund", "Error: busy"),
                          assistant(None, [call])])
    assert reward.grade_turn(twice, 1).breakdown["once@refund"] == "kept"
    assert reward.grade_turn(twice, 3).breakdown["once@refund"] == "broken"
    changed = copy.deepcopy(twice)
    changed["messages"][3] = assistant(None, [("refund", '{"order": "AB12", "amount": 4}')])
    assert reward.grade_turn(changed, 3).breakdown["once@refund"] == "kept"


_TOOLS = [{"type": "function", "function": {"name": "refund", "parameters": {
    "type": "object", "properties": {"order": {"type": "string"}, "amount": {"type": "integer"},
                                     "reason": {"type": "string", "enum": ["late", "broken"]}},
    "required": ["order", "amount"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


def test_call_fits_declaration_checks_the_declared_schema():
    policy = copy.deepcopy(SHOP)
    policy["rules"] = [{"id": "fits", "decision": "tool_call", "require": "call_fits_declaration"}]
    reward = NSRReward({"policy": policy})

    def verdict(arguments, name="refund", tools=_TOOLS):
        conv = _refund(arguments=arguments)
        conv["messages"][1]["tool_calls"][0]["function"]["name"] = name
        conv["tools"] = list(tools)
        return reward.grade_turn(conv, 1).breakdown.get(f"fits@{name}")

    assert verdict('{"order": "AB12", "amount": 5.0, "reason": "late"}') == "kept"  # 5.0 is an integer in JSON
    assert verdict('{"order": "AB12"}') == "broken"  # a required argument missing
    assert verdict('{"order": "AB12", "amount": 5, "extra": 1}') == "broken"  # not declared
    assert verdict('{"order": "AB12", "amount": "5"}') == "broken"  # wrong type
    assert verdict('{"order": "AB12", "amount": 5, "reason": "bored"}') == "broken"  # not one of the enum
    assert verdict('{"order": "AB12", "amount": 5}', name="lookup") == "broken"  # another tool's arguments
    assert verdict('{"order": "AB12", "amount": 5}', name="invented") == "broken"
    assert verdict('{"order": "AB12"}', tools=()) is None  # nothing declared: nothing to check against


# ---------------------------------------------------------------------------------------- airline: every write

def _answered(conv, answer):
    messages = conv["messages"] + [tool("call_0_update_reservation_flights", answer)]
    return conversation(messages)


def test_airline_write_rejected_by_the_system(airline_policy):
    key = "write-accepted@update_reservation_flights"
    conv = _change_conversation(_SAME_FLIGHTS)
    turn = len(conv["messages"]) - 1
    reward = NSRReward({"policy": airline_policy})
    assert reward.grade_turn(_answered(conv, "Error: not enough seats"), turn).breakdown[key] == "broken"
    assert reward.grade_turn(_answered(conv, '{"reservation_id": "R1"}'), turn).breakdown[key] == "kept"


def test_airline_write_identifiers_come_from_the_user_or_a_tool(airline_policy):
    key = "write-arguments-grounded@update_reservation_flights"
    conv = _change_conversation(_SAME_FLIGHTS)
    assert _breakdown(airline_policy, conv)[key] == "kept"
    call = conv["messages"][-1]["tool_calls"][0]["function"]
    call["arguments"] = call["arguments"].replace("credit_card_1", "credit_card_7")  # in no profile
    assert _breakdown(airline_policy, conv)[key] == "broken"


def test_airline_write_details_listed_before_the_yes(airline_policy):
    key = "write-details-listed@update_reservation_flights"
    unnamed = _change_conversation(_SAME_FLIGHTS)  # "Change R1 to these flights": which flights?
    assert _breakdown(airline_policy, unnamed)[key] == "broken"
    listed = _with_messages(unnamed, listing="Change R1 to HAT001 and HAT002 on 2024-05-20, paid by credit_card_1. "
                                             "Confirm?")
    assert _breakdown(airline_policy, listed)[key] == "kept"


def test_airline_after_the_yes_the_agent_acts_before_it_replies(airline_policy):
    key = "act-on-confirmation@turn"
    conv = _change_conversation(_SAME_FLIGHTS)
    reward = NSRReward({"policy": airline_policy})
    stopped = conversation(conv["messages"][:-1] + [assistant("Your reservation has been updated.")])
    assert reward.grade_turn(stopped, len(stopped["messages"]) - 1).breakdown[key] == "broken"
    acted = _answered(conv, '{"reservation_id": "R1"}')
    acted["messages"].append(assistant("Your reservation has been updated."))
    assert key not in reward.grade_turn(acted, len(acted["messages"]) - 1).breakdown  # kept: nothing to score


def test_airline_claimed_change_needs_a_write_that_took_effect(airline_policy):
    key = "claims-backed-by-a-write@turn"
    conv = _change_conversation(_SAME_FLIGHTS)
    reward = NSRReward({"policy": airline_policy})
    claimed = conversation(conv["messages"][:-1] + [assistant("Your reservation has been updated.")])
    assert reward.grade_turn(claimed, len(claimed["messages"]) - 1).breakdown[key] == "broken"
    rejected = _answered(conv, "Error: not enough seats")
    rejected["messages"].append(assistant("Your reservation has been updated."))
    assert reward.grade_turn(rejected, len(rejected["messages"]) - 1).breakdown[key] == "broken"
    done = _answered(conv, '{"reservation_id": "R1"}')
    done["messages"].append(assistant("Your reservation has been updated."))
    assert key not in reward.grade_turn(done, len(done["messages"]) - 1).breakdown


def test_a_voiding_rule_broken_scores_the_turn_zero_whatever_else_it_kept():
    voiding = copy.deepcopy(SHOP)
    voiding["rules"].append({"id": "no-big-refunds", "decision": {"call": "refund"}, "require": "args.amount < 500",
                             "voids": True})
    reward = NSRReward({"policy": voiding})
    assert reward.grade_turn(_refund(), 1).score == 1.0  # kept: no effect
    big = reward.grade_turn(_refund(arguments='{"order": "AB12", "amount": 600}'), 1)
    assert big.score == 0.0 and big.breakdown["no-big-refunds"] == 0.0  # one breach, yet not 0.5: void
    assert NSRReward({"policy": {**voiding, "scoring": "kept_share"}}).grade_turn(
        _refund(arguments='{"order": "AB12", "amount": 600}'), 1).score == 0.0
    for bad in ("yes", 1, None):
        broken = copy.deepcopy(voiding)
        broken["rules"][-1]["voids"] = bad
        with pytest.raises(InputError, match="voids must be true or false"):
            NSRReward({"policy": broken})


def test_turn_claims_and_verb():
    """`turn_claims()`: the change verbs a reply asserts as done, however English says it; `verb(tool)`: a tool's."""
    claims = {**SHOP, "rules": [{"id": "said", "decision": "reply", "when": "turn_claims()",
                                 "require": "all(any(verb(w) == v for w in ['refund_order']) for v in turn_claims())"}]}
    reward = NSRReward({"policy": claims})

    def verdict(text):
        return reward.grade_turn(conversation([user("Hi"), assistant(text)]), 1).breakdown.get("said@turn")

    assert verdict("I went ahead and refunded the order.") == "kept"
    assert verdict("The order was refunded just now, as requested.") == "kept"
    assert verdict("Your order is now cancelled.") == "broken"  # a verb no listed tool has
    assert verdict("Done! I've refunded AB12 and I've cancelled the order.") == "broken"  # one claim unbacked
    for none in ("Once it has been refunded you will get an email.", "It cannot be cancelled.",
                 "Shall I refund the order?", "The order has already been refunded."):
        assert verdict(none) is None, none  # a condition, a negation, a question, a fact found: no claim


def test_airline_a_claim_is_backed_by_a_write_of_its_kind(airline_policy):
    key = "claims-backed-by-a-write@turn"
    reward = NSRReward({"policy": airline_policy})
    done = _answered(_change_conversation(_SAME_FLIGHTS), '{"reservation_id": "R1"}')
    later = done["messages"] + [assistant("Anything else?"), user("No, thanks.")]
    repeated = conversation(later + [assistant("You're welcome: your reservation has been updated.")])
    assert key not in reward.grade_turn(repeated, len(repeated["messages"]) - 1).breakdown  # a report repeated
    other = conversation(later + [assistant("You're welcome: I've cancelled the reservation as well.")])
    graded = reward.grade_turn(other, len(other["messages"]) - 1)
    assert graded.breakdown[key] == "broken"  # only an update took effect, so a cancellation is no report
    assert graded.score == 0.0  # void: the user is told of a change that was not made
    added = conversation(later + [assistant("You're welcome: I've added the new flights to your trip.")])
    assert key not in reward.grade_turn(added, len(added["messages"]) - 1).breakdown  # no write tool says "add"


RECIPES = Path(__file__).resolve().parents[2] / "plugins" / "stateset_plugins" / "recipes" / "policies"


@pytest.mark.parametrize("recipe, write, claim", [
    ("banking", "freeze_card", "Your card has been frozen."),
    ("retail", "return_delivered_items", "Your items have been returned."),
    ("saas_billing", "change_plan", "I've changed your plan."),
    ("telecom", "reset_line", "Your line has been reset successfully."),
])
def test_the_industry_recipes_read_claims_as_the_airline_policy_does(recipe, write, claim):
    reward = NSRReward({"policy": yaml.safe_load((RECIPES / f"{recipe}.yaml").read_text())})
    key = "claims-backed-by-a-write@turn"
    unbacked = conversation([user("Please sort this out."), assistant(claim)])
    graded = reward.grade_turn(unbacked, 1)
    assert graded.breakdown[key] == "broken" and graded.score == 0.0  # no write made it: the reply is void
    backed = conversation([user("Please sort this out, yes go ahead."), assistant(None, [(write, "{}")]),
                           tool(f"call_0_{write}", '{"ok": true}'), assistant(claim)])
    assert key not in reward.grade_turn(backed, 3).breakdown


def test_airline_no_write_repeated_unchanged(airline_policy):
    key = "no-repeated-write@update_reservation_flights"
    first = _change_conversation(_SAME_FLIGHTS)
    assert _breakdown(airline_policy, first)[key] == "kept"
    conv = _answered(first, "Error: not enough seats")
    again = conversation(conv["messages"] + [conv["messages"][-2]])  # the same call, after its error
    assert _breakdown(airline_policy, again)[key] == "broken"


def test_airline_calls_fit_the_declared_tools(airline_policy):
    from tests.helpers.realdata import tau_tools

    key = "calls-fit-their-declaration@update_reservation_baggages"
    conv = _change_conversation(_SAME_FLIGHTS)
    conv["tools"] = tau_tools()
    assert "calls-fit-their-declaration" not in _breakdown(airline_policy, conv)  # fits: a standing rule kept
    conv["messages"][-1]["tool_calls"][0]["function"]["name"] = "update_reservation_baggages"  # flights' arguments
    assert _breakdown(airline_policy, conv)[key] == "broken"


def test_airline_identifiers_the_agent_states_come_from_tools(airline_policy):
    key = "identifiers-stated-come-from-tools@turn"
    conv = _change_conversation(_SAME_FLIGHTS)
    base = conv["messages"][:-3]
    reward = NSRReward({"policy": airline_policy})
    seen = conversation(base + [assistant("I will charge credit_card_1.")])
    assert key not in reward.grade_turn(seen, len(base)).breakdown
    invented = conversation(base + [assistant("Your new reservation number is ZX9Q7Y.")])
    assert reward.grade_turn(invented, len(base)).breakdown[key] == "broken"


def test_airline_no_subjective_recommendations(airline_policy):
    conv = _change_conversation(_SAME_FLIGHTS)
    base = conv["messages"][:-3]
    reward = NSRReward({"policy": airline_policy})
    factual = conversation(base + [assistant("HAT001 leaves at 10:00.")])
    assert "no-subjective-recommendations@turn" not in reward.grade_turn(factual, len(base)).breakdown
    opinion = conversation(base + [assistant("I recommend HAT001; it is the best option.")])
    assert reward.grade_turn(opinion, len(base)).breakdown["no-subjective-recommendations@turn"] == "broken"


# ------------------------------------------------------------------------------------------ airline: domain

def test_airline_flight_change_to_an_unseen_flight_breaks_the_route_rule(airline_policy):
    key = "flight-change-keeps-route@update_reservation_flights"
    assert _breakdown(airline_policy, _change_conversation([("HAT777", "2024-05-21")]))[key] == "broken"
    seen = _change_conversation([("HAT009", "2024-05-21")], search=("AAA", "CCC", [_direct("HAT009", "AAA", "CCC")]))
    assert _breakdown(airline_policy, seen)[key] == "kept"


def _booking_arguments(conv, **changes):
    call = conv["messages"][-1]["tool_calls"][0]["function"]
    arguments = json.loads(call["arguments"])
    arguments.update(changes)
    call["arguments"] = json.dumps(arguments)
    return conv


def test_airline_booking_matches_its_trip(airline_policy):
    key = "booking-matches-its-trip@book_reservation"
    assert _breakdown(airline_policy, _booking([("Ann", "Lee")]))[key] == "kept"
    elsewhere = _booking_arguments(_booking([("Ann", "Lee")]), destination="DDD")
    assert _breakdown(airline_policy, elsewhere)[key] == "broken"
    round_trip = _booking_arguments(_booking([("Ann", "Lee")]), flight_type="round_trip")
    assert _breakdown(airline_policy, round_trip)[key] == "broken"  # the flights do not come back


def test_airline_passenger_date_of_birth_from_the_profile(airline_policy):
    key = "passenger-dob-from-profile@book_reservation"
    wrong = _booking([("Bo", "Lee")])  # the profile saves Bo Lee born 1991-02-02; the booking says 2000-01-01
    assert _breakdown(airline_policy, wrong)[key] == "broken"
    right = _booking_arguments(_booking([("Bo", "Lee")]),
                               passengers=[{"first_name": "Bo", "last_name": "Lee", "dob": "1991-02-02"}])
    assert _breakdown(airline_policy, right)[key] == "kept"
    holder = _booking_arguments(_booking([("Ann", "Lee")]),
                                passengers=[{"first_name": "Ann", "last_name": "Lee", "dob": "1990-01-01"}])
    assert _breakdown(airline_policy, holder)[key] == "kept"  # the user's own dob sits beside the profile's name


def test_airline_certificate_answers_a_flight_complaint_and_a_delay_needs_a_change(airline_policy):
    complaint = "compensation-answers-a-flight-complaint@send_certificate"
    assert _breakdown(airline_policy, _certificate("My seat was uncomfortable.", 100))[complaint] == "broken"
    assert _breakdown(airline_policy, _certificate("My flight was cancelled by the airline.", 200))[complaint] == "kept"
    delay = "delay-certificate-with-a-change-or-cancellation@send_certificate"
    assert _breakdown(airline_policy, _certificate("My flight was delayed.", 100))[delay] == "broken"
    assert _breakdown(airline_policy, _certificate("My flight was delayed, I want to change it.", 100))[delay] == "kept"


def test_airline_certificate_amount_is_exact(airline_policy):
    key = "compensation-amount@send_certificate"
    assert _breakdown(airline_policy, _certificate("My flight was delayed.", 100))[key] == "kept"  # $50 x 2
    assert _breakdown(airline_policy, _certificate("My flight was delayed.", 50))[key] == "broken"


def test_airline_cancellation_refusal_without_the_reservation_is_not_grounded(airline_policy):
    conv = conversation([user("I am u1. Please cancel reservation R1."),
                         assistant("Unfortunately, I cannot cancel this reservation.")])
    assert _breakdown(airline_policy, conv)["cancellation-refusal-grounded@refusal"] == "broken"


def test_airline_refusing_a_cabin_change_or_added_bags_is_a_wrong_denial(airline_policy):
    cabin = "cabin-change-refusal-grounded@refusal"
    upgrade = _passenger_request("Can I upgrade R1 to business class?", "Unfortunately, I cannot upgrade your cabin.")
    assert _breakdown(airline_policy, upgrade)[cabin] == "broken"
    one_leg = _passenger_request("Can I upgrade just one flight of R1 to business?",
                                 "Unfortunately, the cabin cannot change for one flight only.")
    assert _breakdown(airline_policy, one_leg)[cabin] == "kept"
    bags = "bag-addition-refusal-grounded@refusal"
    add = _passenger_request("Can I add a checked bag to R1?", "Unfortunately, I cannot add bags.")
    assert _breakdown(airline_policy, add)[bags] == "broken"
    remove = _passenger_request("Please remove a bag from R1.", "Unfortunately, bags cannot be removed.")
    assert _breakdown(airline_policy, remove)[bags] == "kept"


def test_airline_no_transfer_for_a_change_in_the_number_of_passengers(airline_policy):
    key = "no-transfer-for-passenger-count@transfer_to_human_agents"
    transfer = ("transfer_to_human_agents", '{"summary": "wants another passenger"}')
    count = conversation([user("I am u1. I want to add a passenger to R1."), assistant(None, [transfer])])
    assert _breakdown(airline_policy, count)[key] == "broken"
    name = conversation([user("I am u1. I want to change the passenger name on R1."), assistant(None, [transfer])])
    assert key not in _breakdown(airline_policy, name)

