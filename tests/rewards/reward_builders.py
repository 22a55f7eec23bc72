"""Small builders for hand-written conversations in the reward tests."""


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
