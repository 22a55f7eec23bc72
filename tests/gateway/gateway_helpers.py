"""What the gateway tests share (imported by name; a test module importing `conftest` would get whichever conftest
pytest loaded last): the conversations the tiny model is taught, and how it is taught them."""
from __future__ import annotations

TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look an order up",
                                           "parameters": {"type": "object",
                                                          "properties": {"order_id": {"type": "string"}},
                                                          "required": ["order_id"]}}}]
ANTHROPIC_TOOLS = [{"name": "get_order", "description": "Look an order up",
                    "input_schema": TOOLS[0]["function"]["parameters"]}]
ORDER_QUESTION = "where is my order A1?"
TOOL_CALL_TEXT = '<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>'
GREETING = "hello"
GREETING_REPLY = "hello how can I help you today"


def taught_conversations():
    """(messages, tools, completion text) the base model is taught to answer greedily: a tool call for the order
    question (as each API renders it), a fixed reply to the greeting."""
    from stateset_agents.gateway.messages_api import to_chat_messages, to_chat_tools

    order = [{"role": "user", "content": ORDER_QUESTION}]
    return [(order, TOOLS, TOOL_CALL_TEXT),
            (to_chat_messages(None, order), to_chat_tools(ANTHROPIC_TOOLS), TOOL_CALL_TEXT),
            ([{"role": "user", "content": GREETING}], [], GREETING_REPLY)]


def teach(model_dir, output, examples, steps: int = 1000):
    """The tiny random model, trained by plain next-token loss until greedy decoding reproduces each completion;
    saved to `output` (a real model that answers deterministically, so the tests can check tool calls)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stateset_plugins.models.rendering import ChatRenderer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    renderer = ChatRenderer(tokenizer, 2048)
    rows = []
    for messages, tools, text, *forced in examples:  # forced: a reply start appended to the prompt (tool_choice)
        prompt = renderer.encode(renderer.text(messages, tools or None, generation_prompt=True) + "".join(forced))
        target = renderer.encode(text) + [tokenizer.eos_token_id]
        rows.append((torch.tensor([prompt + target]), torch.tensor([[-100] * len(prompt) + target])))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for step in range(steps):
        outputs = [model(input_ids=ids, labels=labels) for ids, labels in rows]
        loss = sum(o.loss for o in outputs)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # every target token the argmax, by a margin (the server decodes with a KV cache and padding)
        if loss.item() < 0.002 * len(rows) and all(
                bool((o.logits[0, :-1].argmax(-1) == labels[0, 1:])[labels[0, 1:] >= 0].all())
                for o, (_, labels) in zip(outputs, rows)):
            break
    else:
        raise AssertionError("the tiny model did not learn its answers")
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    return output


def make_key(capsys, registry, owner, scope):
    """A key made by `stateset-agents keys create`, read from what it printed."""
    from stateset_agents.cli import main

    capsys.readouterr()
    assert main(["keys", "create", "--registry", str(registry), "--owner", owner, "--scope", scope]) == 0
    return capsys.readouterr().out.split()[0]
