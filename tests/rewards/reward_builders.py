"""Small builders for hand-written conversations in the reward tests, and conversation-level scoring (imported by
name: `from conftest import` depends on which conftest loaded first)."""
from stateset_agents.core.components import assistant_turns

#: What a conversation with no applicable turn scores (documented in docs/rewards.md): neutral.
NO_APPLICABLE_TURN_SCORE = 0.5


def conversation_score(reward, conversation) -> float:
    """Mean of the applicable turns' scores; NO_APPLICABLE_TURN_SCORE when no turn applies."""
    scores = [g.score for g in (reward.grade_turn(conversation, t) for t in assistant_turns(conversation))
              if g.applicable]
    return sum(scores) / len(scores) if scores else NO_APPLICABLE_TURN_SCORE


def user(text):
    return {"role": "user", "content": text}


def assistant(text=None, calls=()):
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}_{name}", "type": "function",
                                  "function": {"name": name, "arguments": arguments}}
                                 for i, (name, arguments) in enumerate(calls)]
    return message


def tool(call_id, content, name=None):
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def conversation(messages, tools=(), **metadata):
    return {"id": "c1", "source": {}, "messages": list(messages), "tools": list(tools), "metadata": metadata}
