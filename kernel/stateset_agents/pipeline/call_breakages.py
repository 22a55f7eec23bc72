"""Breakages of tool calls, and claimed actions, for `improve audit --robustness` (see `breakages`, whose
conventions they follow: pure, seeded, the input never changed, None where the breakage does not apply)."""
from __future__ import annotations

import copy
import random
from typing import Any, Iterable, Mapping, Sequence

from ..plugin_api.text import message_text
from .breakages import (DIGITS, NAME_WORDS, PROSE_WORDS, Broken, ReplyPool, arguments_of, call_view, context_text,
                        declared_tools, found_as_token, is_error_result, message_context, number_spans,
                        prefix_context, result_index, rng_for, set_arguments, shallow_copy, text_replies, text_turn,
                        tool_calls_of, tool_kind, ungrounded_value, with_text)

# Claimed actions: the past tense of a write tool's verb, and phrasings of a completed change.
_PAST = {"cancel": "cancelled", "update": "updated", "book": "booked", "send": "sent", "refund": "refunded",
         "change": "changed", "modify": "modified", "create": "created", "delete": "deleted", "remove": "removed",
         "add": "added", "issue": "issued", "reset": "reset", "set": "set", "submit": "submitted",
         "schedule": "scheduled", "process": "processed", "apply": "applied", "upgrade": "upgraded",
         "reserve": "reserved", "pay": "paid", "edit": "edited", "confirm": "confirmed", "close": "closed",
         "open": "opened", "register": "registered", "assign": "assigned", "approve": "approved", "ship": "shipped",
         "return": "returned", "replace": "replaced", "renew": "renewed", "activate": "activated", "place": "placed",
         "rebook": "rebooked", "reschedule": "rescheduled", "transfer": "transferred", "credit": "credited"}
_CLAIMS = (
    "Done! I've {past} your {obj}{ref}. Is there anything else I can help you with?",
    "Your {obj}{ref} has been {past} successfully.",
    "I have {past} the {obj}{ref} for you; the change is now in effect.",
    "All set: your {obj}{ref} is now {past}, and you'll receive a confirmation email shortly.",
    "Great news, the {obj}{ref} has been {past}. Everything is taken care of.",
    "I went ahead and {past} your {obj}{ref}. You're all set.",
    "The {obj}{ref} was {past} just now, as requested.",
    "Good news: I've {past} the {obj}{ref}, so nothing more is needed from you.",
    "That's taken care of. Your {obj}{ref} is {past}.",
    "I {past} your {obj}{ref} a moment ago; it should already show in your account.",
    "Your {obj}{ref} is {past} now. Thanks for your patience!",
    "Okay, the {obj}{ref} has just been {past} on our side.",
)
# Without a declared write tool to name: completed changes a support agent might claim.
_GENERIC_ACTIONS = (("processed", "refund"), ("cancelled", "order"), ("updated", "account details"),
                    ("changed", "booking"), ("issued", "replacement"), ("reset", "password"))


def _leaves(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, path + (key,))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            yield from _leaves(item, path + (n,))
    else:
        yield path, value


def _enum_values(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, item in schema.items():
            if key == "enum" and isinstance(item, list):
                found.update(str(v).lower() for v in item)
            else:
                found |= _enum_values(item)
    elif isinstance(schema, list):
        for item in schema:
            found |= _enum_values(item)
    return found


def _value_text(value: Any) -> str | None:
    """A call argument as the context would spell it, or None for what is no supplied value (flags, nulls, prose,
    a single character)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else repr(value)
    if isinstance(value, str):
        stripped = value.strip()
        return stripped if len(stripped) >= 2 and len(stripped.split()) <= PROSE_WORDS else None
    return None


def _kind_of(call: Mapping[str, Any], declared: Mapping[str, Mapping[str, Any]]) -> str:
    name = call["function"]["name"]
    return tool_kind(name, declared.get(name))


def _decisions_first(calls: list, declared: Mapping[str, Mapping[str, Any]]) -> list[list]:
    """Calls grouped writes first, then hand-offs, then reads: a breakage targets a decision where there is one."""
    return [[c for c in calls if _kind_of(c[2], declared) == kind] for kind in ("write", "handoff", "read")]


def ungrounded_argument(conversation: Mapping[str, Any], *, seed: int = 0,
                        pool: ReplyPool | None = None) -> Broken | None:
    """One argument value of one call, a value the context before the call supplied (an id, a name, an amount;
    no enum value, flag or prose), changed to a value of the same shape found nowhere in the conversation."""
    rng = rng_for("ungrounded_argument", seed, conversation)
    declared = declared_tools(conversation)
    everywhere, prefix = context_text(conversation), prefix_context(conversation)
    for group in _decisions_first(tool_calls_of(conversation), declared):
        candidates = []
        for i, j, call in group:
            arguments = arguments_of(call)
            if not isinstance(arguments, dict):
                continue
            before = prefix(i)
            enums = _enum_values(declared.get(call["function"]["name"], {}).get("parameters"))
            for path, value in _leaves(arguments):
                text = _value_text(value)
                if path and text and text.lower() not in enums and found_as_token(text, before):
                    candidates.append((i, j, path, value, text))
        if candidates:
            break
    else:
        return None
    i, j, path, value, text = rng.choice(candidates)
    new_text = ungrounded_value(text, rng, everywhere)
    if new_text is None:
        return None
    new_value: Any = new_text
    if isinstance(value, (int, float)):
        new_value = int(new_text) if isinstance(value, int) else float(new_text)
    broken = shallow_copy(conversation)
    broken["messages"][i] = copy.deepcopy(conversation["messages"][i])
    call = broken["messages"][i]["tool_calls"][j]
    original = call_view(call)
    arguments = arguments_of(call)
    target = arguments
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new_value
    set_arguments(call, arguments)
    decision = _kind_of(call, declared) != "read"
    notes = {"argument": ".".join(map(str, path)), "from": value, "to": new_value, "decision": decision}
    return Broken("ungrounded_argument", broken,
                  [{"index": i, "original_index": i, "original": original, "broken": call_view(call)}], notes)


def renamed_call(conversation: Mapping[str, Any], *, seed: int = 0, pool: ReplyPool | None = None) -> Broken | None:
    """One call (a write where there is one) renamed to another declared tool, arguments unchanged: a tool of
    the same kind taking the most of those arguments, so the wrong call looks plausible, but not one taking the
    very same parameters."""
    rng = rng_for("renamed_call", seed, conversation)
    declared = declared_tools(conversation)
    calls = tool_calls_of(conversation)
    if len(declared) < 2 or not calls:
        return None
    group = next(g for g in _decisions_first(calls, declared) if g)  # every call is of one of the kinds
    i, j, call = rng.choice(group)
    name = call["function"]["name"]
    kind = tool_kind(name, declared.get(name))
    arguments = arguments_of(call)
    keys = set(arguments) if isinstance(arguments, dict) else set()

    def parameters(tool: str) -> set[str]:
        return set(((declared.get(tool) or {}).get("parameters") or {}).get("properties") or {})

    def fit(other: str) -> tuple[bool, int]:
        return tool_kind(other, declared[other]) == kind, len(keys & parameters(other))

    # A tool taking exactly the same parameters is left out: nothing in the conversation could tell the two
    # calls apart (a direct and a one-stop search by the same route and date), so it would be no wrong call.
    own = parameters(name) if name in declared else keys
    others = sorted(n for n in declared if n != name and parameters(n) != own)
    if not others:
        return None
    best = max(map(fit, others))
    target = rng.choice([n for n in others if fit(n) == best])
    broken = shallow_copy(conversation)
    broken["messages"][i] = copy.deepcopy(conversation["messages"][i])
    new_call = broken["messages"][i]["tool_calls"][j]
    new_call["function"]["name"] = target
    result = result_index(broken["messages"], i, call.get("id"))
    if result is not None and "name" in broken["messages"][result]:
        broken["messages"][result] = {**broken["messages"][result], "name": target}  # a log names who answered
    decision = kind != "read" or tool_kind(target, declared[target]) != "read"
    return Broken("renamed_call", broken, [{"index": i, "original_index": i, "original": call_view(call),
                                            "broken": call_view(new_call)}],
                  {"from": name, "to": target, "decision": decision})


def _fresh_id(like: str, rng: random.Random, taken: set) -> str:
    """An id in the shape of `like` ("call_" and as many random letters and digits), used by no call."""
    head, sep, tail = like.rpartition("_")
    for _ in range(50):
        body = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") if c.isalpha() else
                       rng.choice("0123456789") if c.isdigit() else c for c in tail)
        candidate = f"{head}{sep}{body}"
        if candidate != like and candidate not in taken:
            return candidate
    return f"{like}{rng.randrange(10 ** 9)}"


def repeated_call(conversation: Mapping[str, Any], *, seed: int = 0, pool: ReplyPool | None = None) -> Broken | None:
    """One call made again, unchanged, right after its results, and answered the same: a call that returned an
    error where there is one (a retry that changes nothing), else a write that took effect (the change made
    twice)."""
    rng = rng_for("repeated_call", seed, conversation)
    messages = conversation.get("messages") or []
    declared = declared_tools(conversation)
    errored, writes = [], []
    for i, j, call in tool_calls_of(conversation):
        result = result_index(messages, i, call.get("id"))
        if result is None:
            continue
        if is_error_result(message_text(messages[result])):
            errored.append((i, call, result))
        elif _kind_of(call, declared) == "write":
            writes.append((i, call, result))
    if not errored and not writes:
        return None
    i, call, result = rng.choice(errored or writes)
    again = copy.deepcopy(call)
    # A fresh id in the shape of the call's own (nothing marks the copy as one).
    taken = {c.get("id") for _, _, c in tool_calls_of(conversation)}
    again["id"] = _fresh_id(str(call.get("id") or "call_0"), rng, taken)
    at = i + 1
    while at < len(messages) and messages[at].get("role") == "tool":
        at += 1
    broken = shallow_copy(conversation)
    broken["messages"][at:at] = [{"role": "assistant", "content": None, "tool_calls": [again]},
                                 {**messages[result], "tool_call_id": again["id"]}]
    return Broken("repeated_call", broken, [{"index": at, "original_index": i, "original": call_view(call),
                                             "broken": call_view(again)}],
                  {"repeated": call["function"]["name"], "after": "error" if errored else "success",
                   "decision": _kind_of(call, declared) != "read"})


def _claim(rng: random.Random, tool: str | None, arguments: Any = None) -> str:
    if tool:
        words = [w.lower() for w in NAME_WORDS.split(tool) if w]
        verb = words[0]
        past = _PAST.get(verb) or (verb + "d" if verb.endswith("e") else verb + "ed")
        obj = " ".join(words[1:]) or "request"
    else:
        past, obj = rng.choice(_GENERIC_ACTIONS)
    # The id of the thing changed ("reservation_id" for a reservation), where the call named one.
    ids = [v for path, v in _leaves(arguments) if path and isinstance(path[-1], str) and isinstance(v, str)
           and DIGITS.search(v) and len(v.split()) == 1 and set(NAME_WORDS.split(path[-1].lower())) & set(obj.split())]
    ref = f" ({ids[0]})" if ids else ""
    return rng.choice(_CLAIMS).format(past=past, obj=obj, ref=ref)


def _remove_call(broken: dict[str, Any], i: int, j: int, result: int, keep: int) -> int:
    """Remove call j of message i and its result from `broken` (the message too, when that call was all it
    held); returns where message `keep` is now."""
    removed = {result}
    message = broken["messages"][i]
    if len(message["tool_calls"]) == 1 and not message_text(message).strip():
        removed.add(i)
    else:
        broken["messages"][i] = {**message, "tool_calls": [c for n, c in enumerate(message["tool_calls"]) if n != j]
                                 or None}
    broken["messages"] = [m for k, m in enumerate(broken["messages"]) if k not in removed]
    return keep - sum(1 for k in removed if k < keep)


def _next_reply(messages: Sequence[Mapping[str, Any]], after: int) -> int | None:
    """The first assistant message with text after `after`, before the user speaks again."""
    for k in range(after + 1, len(messages)):
        role = messages[k].get("role")
        if role == "user":
            return None
        if role == "assistant" and message_text(messages[k]).strip():
            return k
    return None


def skipped_lookup(conversation: Mapping[str, Any], *, seed: int = 0, pool: ReplyPool | None = None) -> Broken | None:
    """A lookup removed, the call and its result, where its result alone had supplied a number or id that the
    next reply states: the reply, unchanged, now answers from nothing (an answer about an order never looked up)."""
    rng = rng_for("skipped_lookup", seed, conversation)
    messages = conversation.get("messages") or []
    declared = declared_tools(conversation)
    contexts = [message_context(m) for m in messages]
    candidates = []
    for i, j, call in tool_calls_of(conversation):
        result = result_index(messages, i, call.get("id"))
        if _kind_of(call, declared) != "read" or result is None or is_error_result(message_text(messages[result])):
            continue
        reply = _next_reply(messages, result)
        if reply is None:
            continue
        # What else grounded the reply: everything before it but this call's message and its result.
        others = "\n".join(c for k, c in enumerate(contexts[:reply]) if k not in (i, result))
        stated = [m.group() for m in number_spans(message_text(messages[reply]))
                  if found_as_token(m.group(), contexts[result]) and not found_as_token(m.group(), others)]
        if stated:
            candidates.append((i, j, call, result, reply, sorted(set(stated))))
    if not candidates:
        return None
    i, j, call, result, reply, stated = rng.choice(candidates)
    broken = shallow_copy(conversation)
    index = _remove_call(broken, i, j, result, reply)
    text = message_text(messages[reply])
    return Broken("skipped_lookup", broken, [{"index": index, "original_index": reply, "original": text,
                                              "broken": text}],
                  {"removed_call": call_view(call), "stated": stated, "decision": False})


def _last_user(messages: Sequence[Mapping[str, Any]], before: int) -> int:
    return next((k for k in range(before - 1, -1, -1) if messages[k].get("role") == "user"), -1)


def claimed_action(conversation: Mapping[str, Any], *, seed: int = 0, pool: ReplyPool | None = None) -> Broken | None:
    """A reply claims a completed change that no call made. Where a successful write is followed by a reply (the
    only successful write since the user's last message), the write and its result are removed and the reply
    says it was done; elsewhere a claim to have made a change is added to a reply with no write since the
    user's last message (naming a declared write tool the conversation never called, where there is one)."""
    rng = rng_for("claimed_action", seed, conversation)
    messages = conversation.get("messages") or []
    declared = declared_tools(conversation)
    writes = []
    for i, j, call in tool_calls_of(conversation):
        if _kind_of(call, declared) == "write":
            result = result_index(messages, i, call.get("id"))
            ok = result is not None and not is_error_result(message_text(messages[result]))
            writes.append((i, j, call, result, ok))
    removable = []
    for i, j, call, result, ok in writes:
        if not ok:
            continue
        reply = next((k for k in range(i + 1, len(messages)) if messages[k].get("role") in ("user", "assistant")
                      and (messages[k].get("role") == "user" or message_text(messages[k]).strip())), None)
        if reply is None or messages[reply].get("role") != "assistant":
            continue
        since = _last_user(messages, i)
        if not any(w[4] and w[2] is not call and since < w[0] < reply for w in writes):
            removable.append((i, j, call, result, reply))
    broken = shallow_copy(conversation)
    if removable:
        i, j, call, result, reply = rng.choice(removable)
        original_text = message_text(messages[reply])
        claim = _claim(rng, call["function"]["name"], arguments_of(call))
        with_text(broken, reply, claim)
        index = _remove_call(broken, i, j, result, reply)
        return Broken("claimed_action", broken, [{"index": index, "original_index": reply,
                                                  "original": original_text, "broken": claim}],
                      {"variant": "write_removed", "removed_call": call_view(call), "decision": True})
    write_at = {w[0] for w in writes}
    candidates = [k for k in text_replies(conversation) if _last_user(messages, k) >= 0
                  and not any(_last_user(messages, k) < w <= k for w in write_at)]
    if not candidates:
        return None
    k = rng.choice(candidates)
    called = {c["function"]["name"] for _, _, c in tool_calls_of(conversation)}
    write_tools = sorted(n for n, d in declared.items() if tool_kind(n, d) == "write")
    fresh = [n for n in write_tools if n not in called] or write_tools
    tool = rng.choice(fresh) if fresh else None
    claim = _claim(rng, tool)
    text = message_text(messages[k])
    new = f"{claim} {text.strip()}" if rng.random() < 0.5 else f"{text.strip()} {claim}"
    with_text(broken, k, new)
    return Broken("claimed_action", broken, [text_turn(k, text, new)], {"variant": "claim_added", "claimed": tool})


