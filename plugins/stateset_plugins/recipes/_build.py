"""What every first-party recipe shares: a seeded generator that writes multi-turn support logs in ingest's `openai`
form, good agent behaviour and the typical flaws, each conversation labelled with what it shows.

A domain module supplies the data (tool schemas, a policy, record factories, the wording); the flows here put it
together. The same seed gives the same conversations, byte for byte: every choice comes from one `random.Random`
seeded with the recipe's name and the seed (a string seed is hashed with SHA-512, not Python's salted `hash`).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterator

GOOD = "good"
#: What each flaw label shows, as the conversation's metadata says it.
FLAWS = {
    "write_without_confirmation": "the agent changes the account without the customer's explicit yes",
    "invented_id": "the agent acts on an identifier that no tool result and no customer message gave",
    "wrong_refund_amount": "the agent refunds or credits an amount the records do not support",
    "missed_transfer": "the customer asks for a person and the agent does not transfer",
    "unhelpful_reply": "the agent sends the customer away instead of using its tools",
}
SHOWS_GOOD = {"write": "the agent looks the record up, lists the change, waits for a yes, then acts",
              "refund": "the agent computes the amount from the records, confirms it, then pays it",
              "handoff": "the agent transfers a customer who asks for a person",
              "status": "the agent looks the record up and answers from it"}
#: The labels each flow can show.
FLOW_LABELS = {"write": (GOOD, "write_without_confirmation", "invented_id"),
               "refund": (GOOD, "wrong_refund_amount", "write_without_confirmation", "invented_id"),
               "handoff": (GOOD, "missed_transfer"),
               "status": (GOOD, "unhelpful_reply")}
AFFIRM = ("Yes, please go ahead.", "Yes, that's correct. Please proceed.", "Yes, go ahead.", "Yes please, do it.")


@dataclass
class Case:
    """One scenario a domain writes for a customer: what the customer says, what the agent looks up, and what it does.

    `write` is the correct state-changing call (tool, arguments); `wrong` the same call with an amount the records do
    not support (refund flows); `id_field` the argument holding the record's id (an invented one replaces it)."""

    opening: str
    lookups: list[tuple[str, dict[str, Any], Any]] = field(default_factory=list)
    proposal: str = ""  # lists the change and asks for the yes
    wrong_proposal: str = ""
    write: tuple[str, dict[str, Any]] | None = None
    wrong: tuple[str, dict[str, Any]] | None = None
    id_field: str = ""
    write_result: Any = None
    done: str = ""
    answer: str = ""  # status: the answer from the records
    followup: str = ""  # handoff: the customer insisting


class Domain:
    """A recipe's domain: subclasses set the attributes and write the four case factories."""

    name = ""
    version = "1.0.0"
    summary = ""
    policy_file = ""  # in this package's policies/ folder
    system = ""
    handoff_tool = ""
    tools: list[dict[str, Any]] = []
    log_format = "openai"  # the ingestor that reads these conversations
    rewards: list[dict[str, Any]] = []
    unhelpful = ("I'm not able to look into that here. Please contact customer service or check our website.",)
    keep_handling = ("I understand, but I can handle this for you myself. Could you tell me a bit more?",
                     "There's no need for that; I can sort this out. What seems to be the problem?")

    # ------------------------------------------------------------------------------ the recipe's contract
    @property
    def policy(self) -> str:
        return resources.files(__package__).joinpath(f"policies/{self.policy_file}").read_text(encoding="utf-8")

    @property
    def policy_text(self) -> str:
        return resources.files(__package__).joinpath("policies/" + self.policy_file.rsplit(".", 1)[0] + ".md") \
            .read_text(encoding="utf-8")

    def generate(self, size: int, seed: int) -> Iterator[dict[str, Any]]:
        rng = random.Random(f"{self.name}:{seed}")
        customers: list[dict[str, Any]] = []
        schedule: list[tuple[str, str]] = []
        for index in range(size):
            if not schedule:  # every flow and label in each block, goods as often as flaws
                schedule = [(flow, label) for flow, labels in FLOW_LABELS.items() for label in labels]
                schedule += [(flow, GOOD) for flow in ("write", "refund", "status", "write", "refund")]
                rng.shuffle(schedule)
            flow, label = schedule.pop()
            if customers and rng.random() < 0.35:  # a returning customer: why the split is by customer
                customer = rng.choice(customers)
            else:
                customer = self.customer(rng, len(customers))
                customers.append(customer)
            case = getattr(self, f"{flow}_case")(rng, customer)
            yield self._conversation(rng, f"{self.name}-s{seed}-{index:05d}", customer, flow, label, case)

    # ------------------------------------------------------------------------------ what a domain writes
    def customer(self, rng: random.Random, n: int) -> dict[str, Any]:
        raise NotImplementedError

    def write_case(self, rng: random.Random, customer: dict[str, Any]) -> Case:
        raise NotImplementedError

    refund_case = status_case = handoff_case = write_case

    # ------------------------------------------------------------------------------ the flows
    def _conversation(self, rng: random.Random, cid: str, customer: dict[str, Any], flow: str, label: str,
                      case: Case) -> dict[str, Any]:
        log = _Log(self.system, cid)
        log.user(case.opening)
        expected = [{"name": t, "arguments": a} for t, a, _ in case.lookups]
        if flow == "handoff":
            summary = {"summary": f"{customer['name']} asked for a person: {case.opening}"}
            expected = [{"name": self.handoff_tool, "arguments": summary}]
            if label == GOOD:
                log.decide()
                log.call(self.handoff_tool, summary, {"status": "transferred", "queue_position": rng.randint(1, 6)})
                log.say("I've transferred you to a member of our team; they have your details and will be with "
                        "you shortly.")
            else:
                log.decide()
                log.say(rng.choice(self.keep_handling))
                log.user(case.followup)
                log.say(rng.choice(self.keep_handling))
        elif flow == "status":
            if label == GOOD:
                log.decide()
                log.lookups(case.lookups)
                log.say(case.answer)
            else:
                log.decide()
                log.say(rng.choice(self.unhelpful))
        else:
            tool, args = case.write
            expected.append({"name": tool, "arguments": args})
            log.lookups(case.lookups)
            if label == "write_without_confirmation":
                log.decide()
                log.call(tool, args, case.write_result)
            else:
                log.say(case.wrong_proposal if label == "wrong_refund_amount" else case.proposal)
                log.user(rng.choice(AFFIRM))
                log.decide()
                if label == "wrong_refund_amount":
                    log.call(*case.wrong, case.write_result)
                elif label == "invented_id":
                    log.call(tool, {**args, case.id_field: _invent(rng, args[case.id_field])}, case.write_result)
                else:
                    log.call(tool, args, case.write_result)
            log.say(case.done)
        shows = SHOWS_GOOD[flow] if label == GOOD else FLAWS[label]
        metadata = {"customer_id": customer["id"], "label": label, "acceptable": label == GOOD, "flow": flow,
                    "shows": shows, "decision_turn": log.decision, "expected_tool_calls": expected}
        return {"id": cid, "messages": log.messages, "tools": self.tools, "metadata": metadata}


def _invent(rng: random.Random, real: str) -> str:
    """An id of the real one's shape that nothing in the conversation gave: its digits and letters redrawn."""
    while True:
        made = "".join(rng.choice("0123456789") if ch.isdigit() else rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ")
                       if ch.isupper() else ch for ch in real)
        if made != real:
            return made


class _Log:
    def __init__(self, system: str, cid: str):
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self.cid, self.calls, self.decision = cid, 0, None

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def decide(self) -> None:
        """The next assistant message is the turn that shows the conversation's label."""
        self.decision = len(self.messages)

    def call(self, tool: str, args: dict[str, Any], result: Any) -> None:
        self.calls += 1
        call_id = f"call_{self.cid.rsplit('-', 1)[-1]}_{self.calls}"
        self.messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": tool, "arguments": json.dumps(args, separators=(",", ":"))}}]})
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": tool,
                              "content": json.dumps(result, separators=(",", ":"))})

    def lookups(self, calls: list[tuple[str, dict[str, Any], Any]]) -> None:
        for tool, args, result in calls:
            self.call(tool, args, result)


def tool(name: str, description: str, properties: dict[str, Any], required: list[str] | None = None
         ) -> dict[str, Any]:
    """An OpenAI function tool schema."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(properties) if required is None else required,
                       "additionalProperties": False}}}


STRING = {"type": "string"}
NUMBER = {"type": "number"}
FIRST = ("Mia", "Noah", "Ava", "Liam", "Sofia", "Ethan", "Amara", "Yusuf", "Chen", "Priya", "Lucas", "Fatima",
         "Mateo", "Hana", "Omar", "Elena", "Kwame", "Ingrid", "Diego", "Aiko")
LAST = ("Garcia", "Nguyen", "Okafor", "Smith", "Kowalski", "Haddad", "Tanaka", "Silva", "Patel", "Johansson",
        "Moreau", "Rossi", "Kim", "Mensah", "Novak", "Ali", "Murphy", "Schmidt", "Costa", "Ivanova")


def person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(FIRST), rng.choice(LAST)


def code(rng: random.Random, letters: int, digits: int, alphabet: str = "ABCDEFGHJKLMNPQRSTUVWXYZ") -> str:
    return "".join(rng.choice(alphabet) for _ in range(letters)) + "".join(rng.choice("0123456789")
                                                                        for _ in range(digits))


def money(value: float) -> float:
    return round(value + 1e-9, 2)
