from reward_builders import assistant, conversation, tool, user
from stateset_plugins.rewards.customer_support import CustomerSupportReward

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
    rejected = grade([user("Please cancel it. Yes, go ahead."), assistant(None, [("cancel_order", "{}")]),
                      tool("call_0_cancel_order", "Error: order already shipped")], index=1)
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
    from helpers.realdata import tau_labels, tau_log_records
    from stateset_agents.stats import roc_auc

    records = tau_log_records(with_expected_calls=False)
    auc, _ = score_auc(CustomerSupportReward(), records)
    labels = tau_labels()
    baseline = roc_auc([len(r["messages"]) for r in records], [labels[r["id"]] for r in records])
    print(f"\ncustomer_support ROC AUC {auc:.3f}; length-only baseline {baseline:.3f}")
    assert auc > baseline
    # Issue 3's target: 0.7 (measured 0.703; the rules come from general support practice, see docs/rewards.md).
    assert auc >= 0.7
