"""The `trainer:*` components: one per objective, each a thin shell over `run.train_run`."""
from __future__ import annotations

from typing import Any, Iterator, Mapping

from stateset_agents import Trainer

from ._version import CAPABILITIES, VERSION
from .run import train_run


class _TrainerComponent(Trainer):
    version = VERSION
    capabilities = CAPABILITIES

    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        request = {**dict(self.config), **dict(request), "algorithm": self.name}
        yield from train_run(request, stop=self._cancel)


class SFTComponent(_TrainerComponent):
    name = "sft"


class GRPOComponent(_TrainerComponent):
    name = "grpo"


class MultiTurnGRPOComponent(_TrainerComponent):
    name = "multi_turn_grpo"


class GSPOComponent(_TrainerComponent):
    name = "gspo"


class DAPOComponent(_TrainerComponent):
    name = "dapo"


class GEPOComponent(_TrainerComponent):
    name = "gepo"


class VAPOComponent(_TrainerComponent):
    name = "vapo"


class PPOComponent(_TrainerComponent):
    name = "ppo"


class RLAIFComponent(_TrainerComponent):
    name = "rlaif"


class CISPOComponent(_TrainerComponent):
    name = "cispo"
