"""Pharmacy refills: the recipe object `industry prepare` reads (tools, policy, policy_text, rewards, log_format,
generate)."""
from __future__ import annotations

import json
import random
from importlib import resources

DRUGS = ("atorvastatin 20 mg", "metformin 500 mg", "lisinopril 10 mg", "levothyroxine 50 mcg", "amlodipine 5 mg")
NAMES = ("Ana Ruiz", "Ben Cohen", "Chloe Martin", "Dev Sharma", "Eva Lindqvist", "Felix Wagner", "Grace Obi")


def _tool(name, description, properties):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}}}


class Pharmacy:
    tools = [_tool("get_prescription", "Look a prescription up: drug, refills left, status.",
                   {"rx_id": {"type": "string"}}),
             _tool("refill_prescription", "Refill a prescription for pickup.", {"rx_id": {"type": "string"}}),
             _tool("transfer_to_pharmacist", "Hand the patient to a pharmacist, with a summary.",
                   {"summary": {"type": "string"}})]
    log_format = "openai"
    rewards = [{"reward": "nsr", "config": {}, "policy": True},
               {"reward": "tool_calling", "config": {"write_tools": ["refill_prescription"]}}]

    @property
    def policy(self) -> str:
        return resources.files(__package__).joinpath("policy.yaml").read_text(encoding="utf-8")

    @property
    def policy_text(self) -> str:
        return resources.files(__package__).joinpath("policy.md").read_text(encoding="utf-8")

    def generate(self, size: int, seed: int):
        rng = random.Random(f"pharmacy:{seed}")
        patients: list[tuple[str, str]] = []
        for i in range(size):
            if patients and rng.random() < 0.3:
                pid, name = rng.choice(patients)
            else:
                pid, name = f"pt_{rng.randint(10000, 99999)}", rng.choice(NAMES)
                patients.append((pid, name))
            label = ("good", "good", "write_without_confirmation", "missed_transfer", "good")[i % 5]
            yield self._conversation(rng, f"pharmacy-s{seed}-{i:04d}", pid, name, label)

    def _conversation(self, rng, cid, pid, name, label):
        system = ("You are a pharmacy assistant. Look the prescription up before a refill, and refill only after the "
                  "patient's explicit yes. Hand a patient who asks for a pharmacist to one.")
        msgs = [{"role": "system", "content": system}]
        calls = iter(range(1, 10))

        def call(tool, args, result):
            call_id = f"call_{cid[-4:]}_{next(calls)}"
            msgs.append({"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function",
                         "function": {"name": tool, "arguments": json.dumps(args)}}]})
            msgs.append({"role": "tool", "tool_call_id": call_id, "name": tool, "content": json.dumps(result)})

        if label == "missed_transfer":
            msgs.append({"role": "user", "content": f"I'm {name} ({pid}). I have a question about side effects; "
                                                    "can I speak to a pharmacist, a real person?"})
            decision = len(msgs)
            msgs.append({"role": "assistant", "content": "I can answer that myself. What are you taking?"})
            expected = [{"name": "transfer_to_pharmacist", "arguments": {"summary": "side effects question"}}]
        else:
            rx, drug = f"RX{rng.randint(100000, 999999)}", rng.choice(DRUGS)
            msgs.append({"role": "user", "content": f"Hi, I'm {name} ({pid}). Please refill prescription {rx}."})
            call("get_prescription", {"rx_id": rx}, {"rx_id": rx, "patient_id": pid, "drug": drug,
                                                      "refills_left": rng.randint(1, 5), "status": "active"})
            if label == "good":
                msgs.append({"role": "assistant", "content": f"Prescription {rx} is for {drug} and has refills left. "
                                                             "Shall I refill it for pickup tomorrow?"})
                msgs.append({"role": "user", "content": "Yes, please go ahead."})
            decision = len(msgs)
            call("refill_prescription", {"rx_id": rx}, {"rx_id": rx, "status": "ready tomorrow"})
            msgs.append({"role": "assistant", "content": f"Prescription {rx} has been refilled; pick it up tomorrow."})
            expected = [{"name": "get_prescription", "arguments": {"rx_id": rx}},
                        {"name": "refill_prescription", "arguments": {"rx_id": rx}}]
        return {"id": cid, "messages": msgs, "tools": self.tools,
                "metadata": {"customer_id": pid, "label": label, "acceptable": label == "good",
                             "decision_turn": decision, "expected_tool_calls": expected}}


RECIPE = Pharmacy()
