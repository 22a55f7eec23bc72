"""`serving:lora`: the model behind `stateset-agents serve`: one base model loaded once, every deployed LoRA adapter
loaded beside it, requests batched and decoded step by step on one engine thread (`engine`), with the loading,
rendering and tool-call parsing of `stateset_plugins.models`.

Registered by a lazy "module:attr" path: `plugins list` and `--help` import this module, which must not import torch.
"""
from __future__ import annotations

from stateset_agents import hookimpl


@hookimpl
def register_serving(register):
    register("lora", target="stateset_plugins.serving.engine:create", requires=["torch", "transformers", "peft"],
             install="pip install 'stateset-agents[train]'",
             help="A transformers model with PEFT LoRA adapters, batched on one engine thread")
