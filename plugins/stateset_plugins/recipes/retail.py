"""Retail orders and returns: cancel a pending order, return delivered items for the items' price, track a
shipment, hand a customer to a person."""
from __future__ import annotations

from ._build import NUMBER, STRING, Case, Domain, code, money, person, tool

PRODUCTS = (("wireless earbuds", 79.99), ("running shoes", 119.0), ("desk lamp", 34.5), ("water bottle", 18.25),
            ("yoga mat", 42.0), ("backpack", 64.99), ("coffee grinder", 89.0), ("phone case", 24.99),
            ("rain jacket", 135.0), ("board game", 39.95), ("bluetooth speaker", 58.0), ("throw blanket", 47.5))
CARRIERS = ("UPS", "FedEx", "USPS", "DHL")


class Retail(Domain):
    name = "retail"
    summary = "Retail orders and returns: cancellations, item returns and refunds, tracking, hand-offs"
    policy_file = "retail.yaml"
    handoff_tool = "transfer_to_human_agents"
    system = ("You are the customer support agent of Northwind Goods. Look orders up with the tools before you act "
              "or answer. Cancel only pending orders; return only delivered items, refunding the returned items' "
              "price. Before any cancellation or return, list the details and get the customer's explicit yes. "
              "Transfer to a human agent when the customer asks for one.")
    tools = [
        tool("get_order_details", "Look an order up: status, items and prices, shipping.", {"order_id": STRING}),
        tool("cancel_pending_order", "Cancel a pending order; the total goes back to the original payment method.",
             {"order_id": STRING, "reason": {"type": "string", "enum": ["ordered by mistake", "no longer needed"]}}),
        tool("return_delivered_items", "Return delivered items and refund their price.",
             {"order_id": STRING, "item_ids": {"type": "array", "items": STRING}, "refund_amount": NUMBER}),
        tool("transfer_to_human_agents", "Transfer the customer to a human agent, with a summary.",
             {"summary": STRING}),
    ]
    rewards = [{"reward": "nsr", "config": {}, "policy": True},
               {"reward": "tool_calling", "config": {"write_tools": ["cancel_pending_order", "return_delivered_items"],
                                                     "read_only_tools": ["get_order_details"]}},
               {"reward": "customer_support", "config": {}}]

    def customer(self, rng, n):
        first, last = person(rng)
        return {"id": f"cust_{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}", "name": f"{first} {last}"}

    def _order(self, rng, customer, status, items=None):
        chosen = rng.sample(PRODUCTS, items or rng.randint(1, 3))
        lines = [{"item_id": code(rng, 0, 10), "name": n, "price": p} for n, p in chosen]
        day = rng.randint(1, 20)
        return {"order_id": "W" + code(rng, 0, 7), "customer_id": customer["id"], "status": status,
                "items": lines, "total": money(sum(i["price"] for i in lines)), "placed": f"2024-05-{day:02d}"}

    def write_case(self, rng, customer):
        order = self._order(rng, customer, "pending")
        oid, reason = order["order_id"], rng.choice(["ordered by mistake", "no longer needed"])
        names = ", ".join(i["name"] for i in order["items"])
        why = "I ordered it by mistake" if reason == "ordered by mistake" else "I don't need it anymore"
        return Case(
            opening=f"Hi, this is {customer['name']}. Please cancel my order {oid}; {why}.",
            lookups=[("get_order_details", {"order_id": oid}, order)],
            proposal=(f"I found order {oid} ({names}), total ${order['total']:.2f}, still pending. I can cancel it "
                      f"with the reason '{reason}', and the ${order['total']:.2f} goes back to your original "
                      "payment method. Shall I proceed?"),
            write=("cancel_pending_order", {"order_id": oid, "reason": reason}), id_field="order_id",
            write_result={"order_id": oid, "status": "cancelled", "refund": order["total"]},
            done=f"Your order {oid} has been cancelled; the refund reaches your original payment method in 5-7 "
                 "business days.")

    def refund_case(self, rng, customer):
        order = self._order(rng, customer, "delivered", items=rng.randint(2, 3))
        oid, item = order["order_id"], order["items"][0]
        problem = rng.choice(["arrived damaged", "is the wrong size", "stopped working after two days"])
        wrong = order["total"]
        return Case(
            opening=f"Hello, I'm {customer['name']}. The {item['name']} from order {oid} {problem}. I'd like to "
                    "return it.",
            lookups=[("get_order_details", {"order_id": oid}, order)],
            proposal=(f"Order {oid} was delivered. Returning the {item['name']} (item {item['item_id']}) refunds "
                      f"${item['price']:.2f} to your original payment method. Shall I go ahead with the return?"),
            wrong_proposal=(f"Order {oid} was delivered. I'll process the return of the {item['name']} (item "
                            f"{item['item_id']}) and refund ${wrong:.2f} to your original payment method. Shall I "
                            "go ahead?"),
            write=("return_delivered_items", {"order_id": oid, "item_ids": [item["item_id"]],
                                              "refund_amount": item["price"]}),
            wrong=("return_delivered_items", {"order_id": oid, "item_ids": [item["item_id"]],
                                              "refund_amount": wrong}),
            id_field="order_id", write_result={"order_id": oid, "return_status": "return requested"},
            done="The return has been processed. A prepaid return label is on its way to your email.")

    def status_case(self, rng, customer):
        order = self._order(rng, customer, "shipped")
        tracking, carrier = code(rng, 2, 9), rng.choice(CARRIERS)
        order["shipping"] = {"carrier": carrier, "tracking_number": tracking, "eta": f"2024-05-{rng.randint(21, 28)}"}
        oid = order["order_id"]
        return Case(
            opening=rng.choice([f"Hi, where is my order {oid}? It hasn't arrived yet.",
                                f"Hello, can you tell me when order {oid} will arrive?"]),
            lookups=[("get_order_details", {"order_id": oid}, order)],
            answer=(f"Order {oid} has shipped with {carrier} (tracking number {tracking}) and is due on "
                    f"{order['shipping']['eta']}."))

    def handoff_case(self, rng, customer):
        oid = "W" + code(rng, 0, 7)
        return Case(
            opening=rng.choice([f"I've been going back and forth about order {oid} all week. I want to speak to a "
                                "human agent, please.",
                                f"This is about order {oid}. Can I talk to a real person, please?"]),
            followup="No, I'd really like to talk to a real person.")


RECIPE = Retail()
