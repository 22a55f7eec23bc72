"""Telecom troubleshooting: diagnostics, line resets, outage credits, hand-offs to technical support."""
from __future__ import annotations

from ._build import NUMBER, STRING, Case, Domain, code, person, tool

#: Daily rates in quarters of a dollar: a credit of rate x days is exact in binary floating point.
DAILY_RATES = (1.25, 1.5, 1.75, 2.0, 2.25)
SYMPTOMS = ("my phone shows 'No service'", "calls drop after a few seconds", "mobile data stopped working",
            "I can't send text messages")


class Telecom(Domain):
    name = "telecom"
    summary = "Telecom troubleshooting: diagnostics, line resets, outage credits, hand-offs"
    policy_file = "telecom.yaml"
    handoff_tool = "transfer_to_technical_support"
    system = ("You are the support agent of Skyline Mobile. Look the line up and run diagnostics before you act or "
              "answer. Reset a line only when diagnostics show stale provisioning. An outage credit is the line's "
              "daily rate times the outage days the diagnostics report. Before a reset or a credit, list the details "
              "and get the customer's explicit yes. Transfer to technical support when the customer asks for a "
              "person.")
    unhelpful = ("Please try restarting your phone, and if that doesn't work, come back later or visit a store.",
                 "I can't check the network from here. Please check our website for outage information.")
    tools = [
        tool("get_line_details", "Look a line up by phone number: line id, plan, daily rate, status.",
             {"phone_number": STRING}),
        tool("run_line_diagnostics", "Run network diagnostics on a line: signal, provisioning, recent outages.",
             {"line_id": STRING}),
        tool("reset_line", "Re-provision a line on the network (drops a call in progress).", {"line_id": STRING}),
        tool("apply_outage_credit", "Credit the line's account for days of outage.",
             {"line_id": STRING, "days": {"type": "integer"}, "amount": NUMBER}),
        tool("transfer_to_technical_support", "Transfer the customer to a technician, with a summary.",
             {"summary": STRING}),
    ]
    rewards = [{"reward": "nsr", "config": {}, "policy": True},
               {"reward": "tool_calling", "config": {"write_tools": ["reset_line", "apply_outage_credit"],
                                                     "read_only_tools": ["get_line_details",
                                                                         "run_line_diagnostics"]}},
               {"reward": "customer_support", "config": {}}]

    def customer(self, rng, n):
        first, last = person(rng)
        return {"id": f"sub_{rng.randint(100000, 999999)}", "name": f"{first} {last}",
                "phone": f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"}

    def _line(self, rng, customer):
        return {"line_id": "LN" + code(rng, 0, 6), "phone_number": customer["phone"], "subscriber": customer["id"],
                "plan": rng.choice(["Basic 5GB", "Unlimited", "Unlimited Plus"]), "daily_rate": rng.choice(DAILY_RATES),
                "status": "active"}

    def _diagnostics(self, rng, line, provisioning, outage_days):
        return {"line_id": line["line_id"], "signal": rng.choice(["good", "fair"]), "provisioning": provisioning,
                "outage_days": outage_days, "tower": "TW" + code(rng, 0, 4)}

    def write_case(self, rng, customer):
        line = self._line(rng, customer)
        diag = self._diagnostics(rng, line, "stale", 0)
        lid, symptom = line["line_id"], rng.choice(SYMPTOMS)
        return Case(
            opening=f"Hi, I'm {customer['name']}, my number is {customer['phone']}. Since yesterday {symptom}.",
            lookups=[("get_line_details", {"phone_number": customer["phone"]}, line),
                     ("run_line_diagnostics", {"line_id": lid}, diag)],
            proposal=(f"The diagnostics show that line {lid} has stale network provisioning. I can reset the line, "
                      "which restores service within about five minutes and drops any call in progress. Shall I go "
                      "ahead?"),
            write=("reset_line", {"line_id": lid}), id_field="line_id",
            write_result={"line_id": lid, "provisioning": "refreshed"},
            done="The line has been reset. Please restart your phone in five minutes; service should be back.")

    def refund_case(self, rng, customer):
        line = self._line(rng, customer)
        days = rng.randint(2, 5)
        diag = self._diagnostics(rng, line, "ok", days)
        lid, credit = line["line_id"], line["daily_rate"] * days
        wrong = credit + line["daily_rate"] * 30
        return Case(
            opening=f"Hello, {customer['name']} here ({customer['phone']}). There was an outage in my area for "
                    "several days and I had no service. I'd like a credit.",
            lookups=[("get_line_details", {"phone_number": customer["phone"]}, line),
                     ("run_line_diagnostics", {"line_id": lid}, diag)],
            proposal=(f"The diagnostics confirm {days} days of outage on line {lid}. At your daily rate of "
                      f"${line['daily_rate']:.2f}, that is a credit of ${credit:.2f}. Shall I apply it?"),
            wrong_proposal=(f"The diagnostics confirm an outage on line {lid}. I'll credit you ${wrong:.2f} for the "
                            "trouble. Shall I apply it?"),
            write=("apply_outage_credit", {"line_id": lid, "days": days, "amount": credit}),
            wrong=("apply_outage_credit", {"line_id": lid, "days": days, "amount": wrong}),
            id_field="line_id", write_result={"line_id": lid, "credit_status": "applied"},
            done="The credit has been applied; it shows on your next bill.")

    def status_case(self, rng, customer):
        line = self._line(rng, customer)
        diag = self._diagnostics(rng, line, "ok", 0)
        return Case(
            opening=rng.choice([f"Hi, is there an outage affecting my number {customer['phone']}?",
                                f"Hello, my signal has been weak today. Can you check {customer['phone']}?"]),
            lookups=[("get_line_details", {"phone_number": customer["phone"]}, line),
                     ("run_line_diagnostics", {"line_id": line["line_id"]}, diag)],
            answer=(f"I checked line {line['line_id']}: there is no outage, provisioning is fine and the signal is "
                    f"{diag['signal']}. If it stays weak, restarting the phone reconnects it to the nearest tower."))

    def handoff_case(self, rng, customer):
        return Case(
            opening=rng.choice([f"My line {customer['phone']} keeps failing. I want to talk to a technician, a real "
                                "person please.",
                                f"I'd like to speak to a human agent about {customer['phone']}, please."]),
            followup="No, please just transfer me to a person.")


RECIPE = Telecom()
