"""SaaS billing: plan changes, refunds of a double charge, invoice questions, hand-offs to a billing specialist."""
from __future__ import annotations

from ._build import NUMBER, STRING, Case, Domain, code, money, person, tool

PLANS = {"starter": 12.0, "team": 30.0, "business": 55.0}
COMPANIES = ("Acme Robotics", "Bluefin Labs", "Cedar Analytics", "Driftwood Studio", "Ember Health", "Fjord Logistics",
             "Granite Legal", "Harbor Foods", "Iris Design", "Juniper Schools")


class SaaSBilling(Domain):
    name = "saas_billing"
    summary = "SaaS billing: plan changes, double-charge refunds, invoices, hand-offs"
    policy_file = "saas_billing.yaml"
    handoff_tool = "transfer_to_billing_specialist"
    system = ("You are the billing assistant of Cloudlane, a project-management SaaS. Look accounts and invoices up "
              "before you act or answer. A double charge is refunded once: the invoice amount, never both charges. "
              "Before a plan change or refund, list the details and get the customer's explicit yes. Transfer to a "
              "billing specialist when the customer asks for a person.")
    unhelpful = ("Billing questions are handled by email. Please contact customer service and they will get back "
                 "to you.", "I can't see billing details here; please check your email for the invoice.")
    tools = [
        tool("get_account", "Look an account up: plan, seats, status, next invoice.", {"account_id": STRING}),
        tool("get_invoice", "Look an invoice up: amount, status, the payments made against it.",
             {"invoice_id": STRING}),
        tool("change_plan", "Change the account's plan from the next billing period.",
             {"account_id": STRING, "plan": {"type": "string", "enum": sorted(PLANS)}}),
        tool("refund_invoice", "Refund an amount paid against an invoice to the card it was paid with.",
             {"invoice_id": STRING, "amount": NUMBER, "reason": STRING}),
        tool("transfer_to_billing_specialist", "Transfer the customer to a billing specialist, with a summary.",
             {"summary": STRING}),
    ]
    rewards = [{"reward": "nsr", "config": {}, "policy": True},
               {"reward": "tool_calling", "config": {"write_tools": ["change_plan", "refund_invoice"],
                                                     "read_only_tools": ["get_account", "get_invoice"]}},
               {"reward": "customer_support", "config": {}}]

    def customer(self, rng, n):
        first, last = person(rng)
        return {"id": "AC" + code(rng, 0, 6), "name": f"{first} {last}", "company": rng.choice(COMPANIES)}

    def _account(self, rng, customer, plan):
        seats = rng.randint(3, 40)
        return {"account_id": customer["id"], "company": customer["company"], "owner": customer["name"],
                "plan": plan, "seats": seats, "status": "active",
                "next_invoice": {"date": f"2024-06-{rng.randint(1, 28):02d}", "amount": money(PLANS[plan] * seats)}}

    def write_case(self, rng, customer):
        old, new = rng.choice([("business", "team"), ("team", "starter"), ("starter", "team"), ("team", "business")])
        account = self._account(rng, customer, old)
        aid = customer["id"]
        return Case(
            opening=f"Hi, {customer['name']} from {customer['company']} here (account {aid}). We'd like to move from "
                    f"the {old.title()} plan to {new.title()}.",
            lookups=[("get_account", {"account_id": aid}, account)],
            proposal=(f"Account {aid} is on {old.title()} with {account['seats']} seats. Moving to {new.title()} "
                      f"changes the price to ${PLANS[new]:.2f} per seat from the next billing period. Shall I make "
                      "the change?"),
            write=("change_plan", {"account_id": aid, "plan": new}), id_field="account_id",
            write_result={"account_id": aid, "plan": new, "effective": account["next_invoice"]["date"]},
            done=f"Your plan has been changed to {new.title()}, effective {account['next_invoice']['date']}.")

    def refund_case(self, rng, customer):
        seats, plan = rng.randint(3, 25), rng.choice(sorted(PLANS))
        amount = money(PLANS[plan] * seats)
        iid = "IN" + code(rng, 0, 7)
        invoice = {"invoice_id": iid, "account_id": customer["id"], "amount": amount, "status": "paid",
                   "payments": [{"payment_id": "PY" + code(rng, 0, 8), "amount": amount},
                                {"payment_id": "PY" + code(rng, 0, 8), "amount": amount}]}
        return Case(
            opening=f"Hello, this is {customer['name']}. We were charged twice for invoice {iid}. Can you fix that?",
            lookups=[("get_invoice", {"invoice_id": iid}, invoice)],
            proposal=(f"Invoice {iid} for ${amount:.2f} was paid twice. I can refund the duplicate payment of "
                      f"${amount:.2f} to the card it was paid with. Shall I proceed?"),
            wrong_proposal=(f"Invoice {iid} was paid twice. I'll refund both payments, ${amount * 2:.2f} in total, "
                            "to your card. Shall I proceed?"),
            write=("refund_invoice", {"invoice_id": iid, "amount": amount, "reason": "duplicate charge"}),
            wrong=("refund_invoice", {"invoice_id": iid, "amount": money(amount * 2), "reason": "duplicate charge"}),
            id_field="invoice_id", write_result={"invoice_id": iid, "refund_status": "issued"},
            done="The refund has been issued; it shows on your card statement within 5-10 business days.")

    def status_case(self, rng, customer):
        account = self._account(rng, customer, rng.choice(sorted(PLANS)))
        nxt = account["next_invoice"]
        return Case(
            opening=rng.choice([f"Hi, when is our next invoice for account {customer['id']}, and how much will it be?",
                                f"Hello, what will account {customer['id']} be billed next month?"]),
            lookups=[("get_account", {"account_id": customer["id"]}, account)],
            answer=(f"Your next invoice is on {nxt['date']}: ${nxt['amount']:.2f} for {account['seats']} seats on "
                    f"the {account['plan'].title()} plan."))

    def handoff_case(self, rng, customer):
        return Case(
            opening=rng.choice([f"I need to discuss a custom contract for account {customer['id']}. Please put me "
                                "through to a real person.",
                                f"Can I speak to a person about the billing on account {customer['id']}?"]),
            followup="No, I want to talk to a human, please.")


RECIPE = SaaSBilling()
