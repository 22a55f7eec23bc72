from stateset_plugins.rewards.customer_support import CustomerSupportReward
from tests.rewards.reward_builders import assistant, conversation, tool, user

TOOLS = [{"type": "function", "function": {"name": "transfer_to_human_agents", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "update_order", "parameters": {"type": "object"}}}]


def grade(messages, index=None, **config):
    conv = conversation(messages, TOOLS)
    return CustomerSupportReward(config or None).grade_turn(conv, len(messages) - 1 if index is None else index)


def test_words_match_on_word_boundaries_not_substrings():
    # "dumbbell" contains "dumb", "humanity" contains "human", "managers" is not "manager": none should count.
    polite = grade([user("Is the dumbbell order here? Humanity needs it."),
                    assistant("Please hold on, your dumbbell order has shipped.")])
    assert polite.breakdown["tone"] == 1.0 and "escalation" not in polite.breakdown
    rude = grade([user("where is it"), assistant("That is a dumb question.")])
    assert rude.breakdown["tone"] == 0.0 and "dumb" in rude.reason


def test_escalates_when_the_user_asks_for_a_human():
    asked = [user("I want to talk to a human agent now.")]
    good = grade(asked + [assistant(None, [("transfer_to_human_agents", '{"summary": "wants a person"}')])])
    assert good.applicable and good.breakdown["escalation"] == 1.0
    ignored = grade(asked + [assistant("Let me try to help you myself first.")])
    assert ignored.breakdown["escalation"] == 0.0 and "asked for a human" in ignored.reason


def test_does_not_escalate_what_it_can_handle():
    needless = grade([user("Can you change my address?"),
                      assistant("I will transfer you to a human agent.")])
    assert needless.breakdown["escalation"] == 0.0
    justified = grade([user("Can you change the number of passengers?"),
                       assistant("I cannot change the passenger count, so I will transfer you to a human agent.")])
    assert justified.breakdown["escalation"] == 1.0


def test_resolution_claims_need_a_successful_tool_call():
    grounded = grade([user("update it"), assistant(None, [("update_order", "{}")]),
                      tool("call_0_update_order", '{"ok": true}'),
                      assistant("Your order has been updated successfully.")])
    assert grounded.breakdown["resolution"] == 1.0 and grounded.breakdown["claims"] == 1.0
    hallucinated = grade([user("update it"), assistant("Your order has been updated successfully.")])
    assert hallucinated.breakdown["claims"] == 0.0 and "no tool call performed" in hallucinated.reason
    sent_away = grade([user("help"), assistant("Once you have the order number, please contact customer service.")])
    assert sent_away.breakdown["resolution"] == 0.0


def test_state_changing_actions_need_the_users_go_ahead():
    asked = grade([user("Update my order to the new address?"), assistant("I will set it to 1 Main St. Proceed?"),
                   user("Yes, go ahead."), assistant(None, [("update_order", "{}")])])
    assert asked.applicable and asked.breakdown == {"consent": 1.0, "effect": 1.0}
    unasked = grade([user("Could you maybe update it to make sure it arrives?"), assistant(None, [("update_order", "{}")])])
    assert unasked.breakdown["consent"] == 0.0 and unasked.score == 0.5 and "go-ahead" in unasked.reason
    retracted = grade([user("No wait, yes later."), assistant(None, [("update_order", "{}")])])
    assert retracted.breakdown["consent"] == 0.0


def test_a_write_the_system_rejects_loses_credit_even_with_consent():
    rejected = grade([user("Please cancel it."), assistant("Cancel it now?"), user("Yes, go ahead."),
                      assistant(None, [("cancel_order", "{}")]),
                      tool("call_0_cancel_order", "Error: order already shipped")], index=3)
    assert rejected.breakdown == {"consent": 1.0, "effect": 0.0} and rejected.score == 0.5
    assert "rejected cancel_order" in rejected.reason


def test_offering_a_transfer_is_not_escalating_and_mentioning_a_person_is_not_asking_for_one():
    offer = grade([user("Can I get a refund?"),
                   assistant("I'm sorry, I can't refund this. Would you like me to transfer you to a human agent?")])
    assert "escalation" not in offer.breakdown
    advice_unasked = grade([user("Why was it delayed?"), assistant("I'm transferring you to a colleague now.")])
    assert advice_unasked.breakdown["escalation"] == 0.0  # an unasked hand-off with no reason it could not help
    goodbye = grade([user("Thanks! Talk to you soon."), assistant("Have a good day!")])
    assert "escalation" not in goodbye.breakdown
    asked = grade([user("Is there a supervisor I could speak to?"),
                   assistant("Of course. Shall I transfer you to a human agent now?")])
    assert asked.breakdown["escalation"] == 1.0  # asked for a person; offering the transfer honours it
    ignored = grade([user("Please transfer me to a real person."), assistant("Let me check your order first.")])
    assert ignored.breakdown["escalation"] == 0.0


def test_saying_the_same_reply_again_marks_it_off_track():
    reply = "I need the reservation number to look into your booking before I can make any changes to it."
    circles = grade([user("change my booking"), assistant(reply), user("I don't have it, can you look it up?"),
                     assistant(reply)])
    assert circles.breakdown["on_track"] == 0.0
    fresh = grade([user("change my booking"), assistant(reply), user("It is ABC123."),
                   assistant("Thanks, I found booking ABC123 for May 3. Which flight would you like instead?")])
    assert "on_track" not in fresh.breakdown


def test_a_user_correcting_the_agent_marks_the_reply_off_track():
    corrected = grade([user("change it"), assistant("Done, it has been changed."),
                       user("I think there is a misunderstanding, that's not what I asked."),
                       assistant("Sorry, let me look again.")])
    assert corrected.breakdown["on_track"] == 0.0
    fine = grade([user("change it please"), assistant("Sure, which address?")])
    assert "on_track" not in fine.breakdown


def test_unsafe_content_voids_the_reply():
    unsafe = grade([user("I'm upset"), assistant("Please, just kill yourself.")])
    assert unsafe.score == 0.0 and unsafe.reason.startswith("unsafe content")


def test_lookup_only_turns_are_not_applicable_and_vocabulary_is_configurable():
    assert not grade([user("hi"), assistant(None, [("get_order", "{}")])]).applicable
    custom = grade([user("hi"), assistant("Righto, mate.")], rude=["righto"])
    assert custom.breakdown["tone"] == 0.0


def test_real_tau_airline_auc_beats_length_baseline(score_auc):
    from stateset_agents.plugin_api.stats import roc_auc
    from tests.helpers.realdata import tau_labels, tau_log_records

    records = tau_log_records(with_expected_calls=False)
    auc, _ = score_auc(CustomerSupportReward(), records)
    labels = tau_labels()
    baseline = roc_auc([len(r["messages"]) for r in records], [labels[r["id"]] for r in records])
    print(f"\ncustomer_support ROC AUC {auc:.3f}; length-only baseline {baseline:.3f}")
    assert auc > baseline
    # Fixed rules (nothing fitted), so this is also the pooled out-of-fold figure. Measured 0.754 for 2.2.0 (0.751
    # for 2.1.0, 0.729 for 2.0.0; issue 13's target is 0.75, and 100 conversations give +-0.1: see docs/rewards.md); guarded a small
    # margin under the measured figure.
    assert auc >= 0.73


# --- Version 2: fluency, grounding, claimed actions, abuse, empty and cut-off replies -----------------------------

ORDER = [user("Hi, where is my order QZ104?"), assistant(None, [("get_order", '{"order_id": "QZ104"}')]),
         tool("call_0_get_order", '{"order_id": "QZ104", "status": "shipped", "eta": "2025-05-20", "total": 1250}')]
REPLY = "Your order QZ104 has shipped and should arrive on May 20. The total was $1,250. Is there anything else?"


def test_a_fluent_grounded_reply_scores_full_marks_on_the_new_checks():
    good = grade(ORDER + [assistant(REPLY)])
    for check in ("word_order", "repetition", "vocabulary", "complete", "grounding", "claims"):
        assert good.breakdown[check] == 1.0, check
    assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in good.breakdown.values())


def test_shuffled_looped_and_gibberish_replies_score_below_the_real_one():
    good = grade(ORDER + [assistant(REPLY)]).score
    words = REPLY.split()
    shuffled = " ".join(words[5:] + words[:5][::-1])
    assert grade(ORDER + [assistant(shuffled)]).score < good
    looped = REPLY + " Is there anything else?" * 2 + " The total was $1,250." * 3
    assert grade(ORDER + [assistant(looped)]).score < good
    gibberish = grade(ORDER + [assistant("What avah, haveenst. We don't have any issue finding the order QZ104.")])
    assert gibberish.breakdown["vocabulary"] < 0.5 and "not fluent" in gibberish.reason


def test_values_found_nowhere_in_the_conversation_lower_grounding():
    invented = grade(ORDER + [assistant(REPLY.replace("QZ104", "QZ907").replace("1,250", "1,730"))])
    assert invented.breakdown["grounding"] < 0.5 and "qz907" in invented.reason
    assert invented.score < grade(ORDER + [assistant(REPLY)]).score


def test_claiming_a_change_no_call_made_voids_the_turn():
    claim = grade(ORDER + [assistant("I've cancelled your order QZ104 and refunded the $1,250.")])
    assert claim.breakdown["claims"] == 0.0 and claim.score == 0.0 and "no tool call performed" in claim.reason
    passive = grade(ORDER + [assistant("The order QZ104 was cancelled just now, as requested.")])
    assert passive.breakdown["claims"] == 0.0
    history = grade(ORDER + [assistant("Order QZ104 was created in May and has shipped.")])
    assert history.breakdown["claims"] == 1.0  # a fact about the past, not a claim of the agent's act


def test_a_claim_is_backed_by_a_write_since_the_user_spoke_or_an_earlier_write_of_that_verb():
    done = [user("Please cancel order QZ104, yes go ahead."), assistant(None, [("cancel_order", '{"id": "QZ104"}')]),
            tool("call_0_cancel_order", '{"ok": true}')]
    assert grade(done + [assistant("I've cancelled order QZ104.")]).breakdown["claims"] == 1.0
    later = done + [assistant("Anything else?"), user("What happened to my order?")]
    assert grade(later + [assistant("Your order QZ104 has been cancelled.")]).breakdown["claims"] == 1.0
    assert grade(later + [assistant("Your order QZ104 has been refunded.")]).breakdown["claims"] == 0.0


def test_claims_are_read_as_tool_calling_and_nsr_read_them():
    """One reading of a claimed change for the three rewards (`_tool_grounding.claim_reading`): a clause under a
    condition, modal or negation asserts nothing, a message asking for the go-ahead promises nothing yet, and a
    hand-off is escalation's to judge."""
    for text in ("Checked bags cannot be removed once they have been added to a reservation.",
                 "Once the order is cancelled, I can help you book a new one.",
                 "I will add 3 bags to your order. Please confirm if you would like me to proceed with this update.",
                 "I will transfer you to a human agent who can help with that. Please hold on.",
                 "Refuse the delivery and we'll refund it when it comes back."):
        assert grade(ORDER + [assistant(text)]).breakdown["claims"] == 1.0, text
    for text in ("I went ahead and cancelled your order QZ104.", "Your order QZ104 is now cancelled."):
        assert grade(ORDER + [assistant(text)]).breakdown["claims"] == 0.0, text


def test_a_promise_to_act_without_acting_or_asking_is_half_a_claim():
    promise = grade(ORDER + [assistant("I'll cancel your order QZ104 now.")])
    assert promise.breakdown["claims"] == 0.5
    asking = grade(ORDER + [assistant("I'll cancel your order QZ104. Shall I go ahead?")])
    assert asking.breakdown["claims"] == 1.0


def test_insults_slurs_and_hateful_remarks_void_the_reply():
    for remark in ("Honestly, you are a complete moron.", "People like you are so clueless.",
                   "Those immigrants are ruining everything.", "Stop whining, you lowlife."):
        bad = grade(ORDER + [assistant(REPLY + " " + remark)])
        assert bad.breakdown["safety"] == 0.0 and bad.score == 0.0, remark
    fine = grade(ORDER + [assistant("I understand this is frustrating for you, and I'm sorry for the delay.")])
    assert fine.breakdown["safety"] == 1.0


def test_an_empty_reply_scores_zero_and_a_cut_off_one_loses_completeness():
    empty = grade(ORDER + [assistant("")])
    assert empty.applicable and empty.score == 0.0 and empty.breakdown == {"complete": 0.0}
    cut = grade(ORDER + [assistant("Your order QZ104 has shipped and the refund will go to the")])
    assert cut.breakdown["complete"] == 0.0 and cut.score < grade(ORDER + [assistant(REPLY)]).score


def test_a_write_needs_a_yes_to_a_question_and_arguments_from_the_conversation():
    asked = [user("Change the delivery for order QZ104 to 9 Elm Road"), assistant(None, [("get_order", "{}")]),
             tool("call_0_get_order", '{"order_id": "QZ104"}'),
             assistant("I will change order QZ104 to 9 Elm Road. Shall I proceed?"), user("Yes please.")]
    good = grade(asked + [assistant(None, [("update_order", '{"order_id": "QZ104", "address": "9 Elm Road"}')])])
    assert good.breakdown == {"consent": 1.0, "effect": 1.0, "grounding": 1.0, "verified": 1.0}
    unasked = [user("Change the delivery for order QZ104 to 9 Elm Road"),
               assistant("Noted, the address is 9 Elm Road."), user("Yes please.")]
    blind = grade(unasked + [assistant(None, [("update_order", '{"order_id": "QZ104", "address": "9 Elm Road"}')])])
    assert blind.breakdown["consent"] == 0.5  # a yes to no question
    assert blind.breakdown["verified"] == 0.0 and "no tool returned" in blind.reason  # the order was never looked up
    invented = grade(asked + [assistant(None, [("update_order", '{"order_id": "QZ777", "address": "9 Elm Road"}')])])
    assert invented.breakdown["grounding"] < 1.0 and "qz777" in invented.reason


def test_metamorphic_broken_replies_score_below_real_ones_on_real_logs():
    """Win rate per kind on the real dev logs (original strictly higher, ties half) with this test's own breakages;
    `improve audit --robustness` runs the kernel's."""
    import copy
    import random
    import re

    from tests.helpers.realdata import tau_log_records
    from tests.rewards.reward_builders import conversation_score

    records = tau_log_records(with_expected_calls=False)
    reward = CustomerSupportReward()
    rng = random.Random(13)
    pool = [(r["id"], m["content"]) for r in records for m in r["messages"]
            if m["role"] == "assistant" and (m.get("content") or "").strip()]

    def replies(conv):
        return [m for m in conv["messages"] if m["role"] == "assistant" and (m.get("content") or "").strip()]

    def shuffle(text, cid):
        words = text.split()
        rng.shuffle(words)
        return " ".join(words)

    def foreign(text, cid):
        return rng.choice([t for c, t in pool if c != cid])

    def loop(text, cid):
        sentence = rng.choice(re.split(r"(?<=[.!?])\s+", text))
        return text + (" " + sentence) * 4

    def insult(text, cid):
        return text + " " + rng.choice(["You are an idiot.", "What a pathetic question, loser.",
                                        "Honestly, people like you are worthless."])

    def numbers(text, cid):
        return re.sub(r"\d", lambda m: str((int(m.group(0)) + 3) % 10), text)

    def claim(text, cid):
        return text + " " + rng.choice(["I've cancelled your reservation.", "I have refunded the full amount.",
                                        "Your booking has been updated."])

    kinds = {"shuffle": shuffle, "foreign": foreign, "loop": loop, "insult": insult, "numbers": numbers,
             "claim": claim}
    for name, breakage in kinds.items():
        wins = 0.0
        for record in records:
            broken = copy.deepcopy(record)
            if name == "claim":  # the claim must have no call behind it: drop every call and its result
                broken["messages"] = [m for m in broken["messages"]
                                      if m["role"] != "tool" and not (m["role"] == "assistant" and m.get("tool_calls"))]
            for message in replies(broken):
                message["content"] = breakage(message["content"], record["id"])
            original, copied = conversation_score(reward, record), conversation_score(reward, broken)
            wins += 1.0 if original > copied else 0.5 if original == copied else 0.0
        assert wins / len(records) >= 0.9, (name, wins / len(records))
