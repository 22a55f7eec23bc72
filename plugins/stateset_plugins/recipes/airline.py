"""Airline support on the shipped airline policy (`stateset_plugins.rewards`' policies/airline.yaml, read as it
ships, never copied): cancellations, compensation certificates, reservation questions, hand-offs. The tools are
the tau-bench airline tools these rules are written for (same names and arguments)."""
from __future__ import annotations

from importlib import resources

from ._build import NUMBER, STRING, Case, Domain, code, person, tool

AIRPORTS = ("JFK", "LAX", "SFO", "ORD", "SEA", "BOS", "MIA", "ATL", "DEN", "PHX", "EWR", "DFW")
CABINS = ("economy", "business")


class Airline(Domain):
    name = "airline"
    summary = "Airline support: cancellations, compensation, reservations, hand-offs (the shipped airline policy)"
    handoff_tool = "transfer_to_human_agents"
    system = ("You are an airline customer service agent; the current time is 2024-05-15 15:00:00 EST. Obtain the "
              "user id and look the user and reservation up before acting. Before any action that updates the "
              "booking database, list the details and obtain the user's explicit confirmation (yes). Make one tool "
              "call at a time. Offer a certificate only to an eligible user who complains and asks for "
              "compensation: $100 per passenger for a cancelled flight. Transfer to a human agent only when the user "
              "asks or the request is out of scope.")
    unhelpful = ("I can't see reservation details here. Please check the airline's official website or your "
                 "confirmation email.", "For that you'll need to contact customer service; they can help you.")
    tools = [
        tool("get_user_details", "Get the details of a user, including their reservations.", {"user_id": STRING}),
        tool("get_reservation_details", "Get the details of a reservation.", {"reservation_id": STRING}),
        tool("cancel_reservation", "Cancel the whole reservation.", {"reservation_id": STRING}),
        tool("send_certificate", "Send a travel certificate to a user.", {"user_id": STRING, "amount": NUMBER}),
        tool("transfer_to_human_agents", "Transfer the user to a human agent, with a summary of the user's issue.",
             {"summary": STRING}),
    ]
    rewards = [{"reward": "nsr", "config": {}, "policy": True},
               {"reward": "tool_calling", "config": {"write_tools": ["cancel_reservation", "send_certificate"],
                                                     "read_only_tools": ["get_user_details",
                                                                         "get_reservation_details"]}},
               {"reward": "customer_support", "config": {}}]

    @property
    def policy(self) -> str:
        # the shipped policy itself, unchanged: editing the bundle's copy is the team's move, not ours
        return resources.files("stateset_plugins.rewards").joinpath("policies/airline.yaml").read_text(
            encoding="utf-8")

    @property
    def policy_text(self) -> str:
        return resources.files(__package__).joinpath("policies/airline.md").read_text(encoding="utf-8")

    def customer(self, rng, n):
        first, last = person(rng)
        return {"id": f"{first.lower()}_{last.lower()}_{rng.randint(100, 9999)}", "name": f"{first} {last}",
                "first": first, "last": last,
                "dob": f"19{rng.randint(60, 99)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                "membership": rng.choice(["regular", "silver", "gold"]),
                "payment": f"credit_card_{rng.randint(1000000, 9999999)}"}

    def _reservation(self, rng, customer, cabin, passengers=1, created="2024-05-01T10:00:00"):
        origin, destination = rng.sample(AIRPORTS, 2)
        day = rng.randint(18, 30)
        flights = [{"flight_number": code(rng, 3, 3), "origin": origin, "destination": destination,
                    "date": f"2024-05-{day}", "price": rng.randint(120, 900)}]
        people = [{"first_name": customer["first"], "last_name": customer["last"], "dob": customer["dob"]}]
        for _ in range(passengers - 1):
            first, last = person(rng)
            people.append({"first_name": first, "last_name": last, "dob": f"19{rng.randint(60, 99)}-05-20"})
        # six upper-case letters and digits, at least one of each, as tau's reservation ids (ZFA04Y)
        rid = code(rng, 2, 1) + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(2)) \
            + code(rng, 1, 0)
        return {"reservation_id": rid, "user_id": customer["id"], "origin": origin, "destination": destination,
                "flight_type": "one_way", "cabin": cabin, "flights": flights, "passengers": people,
                "payment_history": [{"payment_id": customer["payment"],
                                     "amount": sum(f["price"] for f in flights) * passengers}],
                "created_at": created, "total_baggages": 0, "nonfree_baggages": 0, "insurance": "no",
                "status": "confirmed"}

    def _user(self, customer, reservations):
        return {"user_id": customer["id"], "name": {"first_name": customer["first"], "last_name": customer["last"]},
                "dob": customer["dob"], "membership": customer["membership"],
                "payment_methods": {customer["payment"]: {"source": "credit_card", "id": customer["payment"]}},
                "saved_passengers": [], "reservations": [r["reservation_id"] for r in reservations]}

    def write_case(self, rng, customer):
        within_day = rng.random() < 0.5
        res = self._reservation(rng, customer, "economy" if within_day else "business",
                                created="2024-05-15T09:30:00" if within_day else "2024-05-02T11:00:00")
        rid, leg = res["reservation_id"], res["flights"][0]
        why = rng.choice(["my plans have changed", "of a change of plans", "of a family emergency"])
        return Case(
            opening=f"Hi, I'm {customer['name']}, user id {customer['id']}. I need to cancel reservation {rid} "
                    f"because {why}.",
            lookups=[("get_user_details", {"user_id": customer["id"]}, self._user(customer, [res])),
                     ("get_reservation_details", {"reservation_id": rid}, res)],
            proposal=(f"Reservation {rid}: flight {leg['flight_number']} from {leg['origin']} to "
                      f"{leg['destination']} on {leg['date']}, {res['cabin']} cabin. It can be cancelled, and the "
                      "refund goes to the original payment method within 5 to 7 business days. Do you confirm the "
                      "cancellation (yes)?"),
            write=("cancel_reservation", {"reservation_id": rid}), id_field="reservation_id",
            write_result={**res, "status": "cancelled"},
            done=f"Reservation {rid} has been cancelled. The refund will reach your original payment method within "
                 "5 to 7 business days.")

    def refund_case(self, rng, customer):
        passengers = rng.randint(1, 3)
        cabin = "business" if customer["membership"] == "regular" else rng.choice(CABINS)
        res = self._reservation(rng, customer, cabin, passengers)
        rid, leg, amount = res["reservation_id"], res["flights"][0], 100 * passengers
        wrong = amount + rng.choice([50, 100, 150])
        return Case(
            opening=f"Hello, I'm {customer['name']} ({customer['id']}). My flight {leg['flight_number']} on "
                    f"reservation {rid} was cancelled by the airline and I had to rebook. I'd like some compensation.",
            lookups=[("get_user_details", {"user_id": customer["id"]}, self._user(customer, [res])),
                     ("get_reservation_details", {"reservation_id": rid}, res)],
            proposal=(f"I'm sorry about the cancelled flight. As the reservation holds {passengers} passenger(s), I "
                      f"can send you a travel certificate of ${amount} ($100 per passenger). Shall I send it?"),
            wrong_proposal=(f"I'm sorry about the cancelled flight. I can send you a travel certificate of ${wrong}. "
                            "Shall I send it?"),
            write=("send_certificate", {"user_id": customer["id"], "amount": amount}),
            wrong=("send_certificate", {"user_id": customer["id"], "amount": wrong}),
            id_field="user_id", write_result={"certificate_id": "certificate_" + code(rng, 0, 7), "status": "sent"},
            done="The certificate has been sent to your account; you can use it on your next booking.")

    def status_case(self, rng, customer):
        res = self._reservation(rng, customer, rng.choice(CABINS))
        rid, leg = res["reservation_id"], res["flights"][0]
        return Case(
            opening=rng.choice([f"Hi, can you tell me the flight on my reservation {rid}? My user id is "
                                f"{customer['id']}.",
                                f"Hello, which date do I fly on reservation {rid}? I'm {customer['id']}."]),
            lookups=[("get_reservation_details", {"reservation_id": rid}, res)],
            answer=(f"Reservation {rid} holds flight {leg['flight_number']} from {leg['origin']} to "
                    f"{leg['destination']} on {leg['date']}, in {res['cabin']}."))

    def handoff_case(self, rng, customer):
        return Case(
            opening=rng.choice([f"I'm {customer['id']}. I need to speak to a human agent about a complaint.",
                                f"Please transfer me to a real person; my user id is {customer['id']}."]),
            followup="No, I'd like to talk to a human agent, please.")


RECIPE = Airline()
