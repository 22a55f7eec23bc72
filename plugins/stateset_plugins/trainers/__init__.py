"""First-party trainers: one engine (`engine`), objectives (`objectives/`), one backend seam (`backend`).

Registered by lazy "module:attr" paths, because this module is imported by `plugins list` and must not import torch.
"""
from __future__ import annotations

from stateset_agents import hookimpl

from ._version import CAPABILITIES, VERSION

_COMPONENTS = {
    "sft": "SFTComponent",
    "grpo": "GRPOComponent",
    "multi_turn_grpo": "MultiTurnGRPOComponent",
    "gspo": "GSPOComponent",
    "dapo": "DAPOComponent",
    "gepo": "GEPOComponent",
    "vapo": "VAPOComponent",
    "ppo": "PPOComponent",
    "rlaif": "RLAIFComponent",
    "cispo": "CISPOComponent",
}


@hookimpl
def register_trainers(register):
    for name, cls in _COMPONENTS.items():
        register(f"stateset_plugins.trainers.components:{cls}", name=name, version=VERSION,
                 requires=["torch", "transformers", "peft"], install="pip install 'stateset-agents[train]'",
                 capabilities=CAPABILITIES)
