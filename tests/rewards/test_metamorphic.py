"""Metamorphic tests on the tau-airline dev logs: a reward must score a real conversation strictly above its copy
broken on purpose (`pipeline.breakages`, the same breakages `improve audit --robustness` runs), in at least 90% of
the conversations a breakage applies to, per kind (ties count half; a conversation scores the mean of its
applicable turns).

customer_support is held to the kinds that break text, tool_calling (with and without expected calls) to those that
break calls and to claimed actions, nsr (airline policy) to the kinds that change a decision, counted only where
the copy's changed call is a write or hand-off. Run with `-s` to see the table of win rates; its ceiling column is
the highest win rate the reward could reach (an original that scores 0 can at best tie its broken copy).
"""
from __future__ import annotations

import pytest

from tests.helpers.realdata import tau_log_records
from stateset_agents.pipeline.robustness import robustness_report
from stateset_agents.core.runtimes import load_component

TARGET = 0.9
# Known short of the target, guarded at what it measures so that it cannot fall further unnoticed; raise the floor
# when the reward improves.
OPEN: dict[tuple[str, str], float] = {}
MIN_APPLIED = 30  # a win rate over fewer conversations says little: the test fails rather than passes vacuously
SEED = 0

TEXT_KINDS = ("shuffled_words", "foreign_reply", "looped_sentence", "insult_added", "ungrounded_numbers",
              "claimed_action", "empty_reply", "truncated_reply")
CALL_KINDS = ("claimed_action", "ungrounded_argument", "renamed_call", "repeated_call", "skipped_lookup")
DECISION_KINDS = ("ungrounded_argument", "renamed_call", "claimed_action", "repeated_call")

# (label, reward, with expected calls, needs the airline policy, kinds, only copies that touch a decision)
SETUPS = (
    ("customer_support", "customer_support", False, False, TEXT_KINDS, False),
    ("tool_calling, expected calls", "tool_calling", True, False, CALL_KINDS, False),
    ("tool_calling, no expected calls", "tool_calling", False, False, CALL_KINDS, False),
    ("nsr, airline policy", "nsr", False, True, DECISION_KINDS, True),
)


@pytest.fixture(scope="module")
def reports(airline_policy):
    found = {}
    for label, reward, expected, policy, kinds, decisions in SETUPS:
        config = {"policy": airline_policy} if policy else {}
        with load_component(f"reward:{reward}", kind="reward", config=config) as grader:
            found[label] = robustness_report(
                tau_log_records(with_expected_calls=expected), grader, kinds=kinds, seed=SEED, examples=2,
                keep=(lambda b: b.touches_decision) if decisions else None)
    print("\n" + table(found))
    return found


def table(found) -> str:
    lines = [f"{'reward':32} {'breakage':20} {'applied':>7} {'win rate':>8} {'ceiling':>7}  wins/ties/losses"]
    for label, report in found.items():
        for kind, k in report["kinds"].items():
            rate, best = ("n/a" if v is None else f"{v:.3f}" for v in (k["win_rate"], k["best_possible"]))
            lines.append(f"{label:32} {kind:20} {k['applied']:7d} {rate:>8} {best:>7}  "
                         f"{k['wins']}/{k['ties']}/{k['losses']}")
    return "\n".join(lines)


CASES = [(label, kind) for label, _, _, _, kinds, _ in SETUPS for kind in kinds]
IDS = [f"{label.split(',')[0]}{'-expected' if 'expected calls' in label and 'no ' not in label else ''}-{kind}"
       for label, kind in CASES]


@pytest.mark.parametrize("label, kind", CASES, ids=IDS)
def test_a_broken_copy_scores_below_the_real_conversation(reports, label, kind):
    k = reports[label]["kinds"][kind]
    assert k["applied"] >= MIN_APPLIED, f"{kind} applied to only {k['applied']} conversations"
    fooled = "; ".join(f"{e['conversation_id']} {e['original_score']:.3f} -> {e['broken_score']:.3f}: {e['reason']}"
                       for e in k["examples"])
    assert k["win_rate"] >= OPEN.get((label, kind), TARGET), (f"{label}, {kind}: win rate {k['win_rate']:.3f} (wins/ties/losses "
                                     f"{k['wins']}/{k['ties']}/{k['losses']}); fooled by {fooled}\n"
                                     + table(reports))
