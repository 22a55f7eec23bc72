"""Banking card disputes: card freezes, disputed charges, dispute status, hand-offs to a fraud specialist."""
from __future__ import annotations

from ._build import NUMBER, STRING, Case, Domain, code, money, person, tool

MERCHANTS = ("QuickMart", "Stellar Electronics", "Bistro 21", "FlyHigh Travel", "Metro Fuel", "Pixel Games",
             "Urban Outfit", "GreenLeaf Grocers", "SkyStream Media", "Harbor Hotel")


class Banking(Domain):
    name = "banking"
    summary = "Banking card disputes: card freezes, disputed charges, dispute status, hand-offs"
    policy_file = "banking.yaml"
    handoff_tool = "transfer_to_fraud_specialist"
    system = ("You are the card services assistant of Meridian Bank. Look the card's transactions up before you act "
              "or answer. A dispute is for the disputed transaction's exact amount. Before freezing a card or opening "
              "a dispute, list the details and get the customer's explicit yes. Transfer to a fraud specialist when "
              "the customer asks for a person.")
    unhelpful = ("For disputes, please call the number on the back of your card or visit a branch.",
                 "I'm not able to see that. Please check your email for updates on the dispute.")
    tools = [
        tool("get_card_transactions", "Look a card up: status and recent transactions.", {"card_id": STRING}),
        tool("get_dispute_status", "Look a dispute up: its status and the provisional credit.", {"dispute_id": STRING}),
        tool("freeze_card", "Freeze a card: no new payments until it is unfrozen.",
             {"card_id": STRING, "reason": {"type": "string", "enum": ["lost", "stolen", "suspicious activity"]}}),
        tool("open_dispute", "Dispute a card transaction; a provisional credit of the amount follows.",
             {"transaction_id": STRING, "amount": NUMBER, "reason": STRING}),
        tool("transfer_to_fraud_specialist", "Transfer the customer to a fraud specialist, with a summary.",
             {"summary": STRING}),
    ]
    rewards = [{"reward": "nsr", "config": {}, "policy": True},
               {"reward": "tool_calling", "config": {"write_tools": ["freeze_card", "open_dispute"],
                                                     "read_only_tools": ["get_card_transactions",
                                                                         "get_dispute_status"]}},
               {"reward": "customer_support", "config": {}}]

    def customer(self, rng, n):
        first, last = person(rng)
        return {"id": f"client_{rng.randint(100000, 999999)}", "name": f"{first} {last}",
                "card": "CD" + code(rng, 0, 6)}

    def _card(self, rng, customer):
        txns = [{"transaction_id": "TX" + code(rng, 0, 8), "merchant": m,
                 "amount": money(rng.randint(500, 60000) / 100), "date": f"2024-05-{rng.randint(1, 14):02d}"}
                for m in rng.sample(MERCHANTS, 3)]
        return {"card_id": customer["card"], "holder": customer["name"], "status": "active", "transactions": txns}

    def write_case(self, rng, customer):
        card = self._card(rng, customer)
        reason = rng.choice(["lost", "stolen"])
        cid = customer["card"]
        return Case(
            opening=f"Hi, this is {customer['name']}. I think my card {cid} was {reason}. Please freeze it.",
            lookups=[("get_card_transactions", {"card_id": cid}, card)],
            proposal=(f"Card {cid} is active and its last three transactions look like yours. I can freeze it now "
                      "(reason: " + reason + "); no new payments will go through until it is unfrozen. Shall I "
                      "freeze it?"),
            write=("freeze_card", {"card_id": cid, "reason": reason}), id_field="card_id",
            write_result={"card_id": cid, "status": "frozen"},
            done=f"Card {cid} has been frozen. A replacement can be ordered whenever you're ready.")

    def refund_case(self, rng, customer):
        card = self._card(rng, customer)
        txn = card["transactions"][rng.randrange(3)]
        tid, amount = txn["transaction_id"], txn["amount"]
        wrong = money(amount + rng.choice([10, 25, 50]))
        return Case(
            opening=f"Hello, {customer['name']} here. There's a charge from {txn['merchant']} on my card "
                    f"{customer['card']} that I didn't make. I want to dispute it.",
            lookups=[("get_card_transactions", {"card_id": customer["card"]}, card)],
            proposal=(f"I see transaction {tid}: {txn['merchant']}, ${amount:.2f} on {txn['date']}. I can open a "
                      f"dispute for ${amount:.2f}; a provisional credit follows within two business days. Shall I "
                      "open it?"),
            wrong_proposal=(f"I see transaction {tid} from {txn['merchant']}. I'll open a dispute for ${wrong:.2f} "
                            "to cover any fees as well. Shall I open it?"),
            write=("open_dispute", {"transaction_id": tid, "amount": amount, "reason": "not recognised"}),
            wrong=("open_dispute", {"transaction_id": tid, "amount": wrong, "reason": "not recognised"}),
            id_field="transaction_id", write_result={"dispute_id": "DP" + code(rng, 0, 7), "status": "open"},
            done="The dispute has been opened; the provisional credit reaches your account within two business days.")

    def status_case(self, rng, customer):
        did = "DP" + code(rng, 0, 7)
        status = rng.choice(["under review", "resolved in your favour", "waiting for the merchant"])
        record = {"dispute_id": did, "status": status, "provisional_credit": money(rng.randint(1000, 30000) / 100)}
        return Case(
            opening=rng.choice([f"Hi, what's the status of my dispute {did}?",
                                f"Hello, I opened dispute {did} last week. Any news?"]),
            lookups=[("get_dispute_status", {"dispute_id": did}, record)],
            answer=(f"Dispute {did} is {status}; the provisional credit of ${record['provisional_credit']:.2f} "
                    "stays on your account meanwhile."))

    def handoff_case(self, rng, customer):
        return Case(
            opening=rng.choice([f"Someone has been using my card {customer['card']} all week. I want to talk to a "
                                "person in fraud, a human please.",
                                f"Please connect me with a real person about card {customer['card']}."]),
            followup="No, I'd rather speak to a human agent.")


RECIPE = Banking()
