"""First-party evaluators: `evaluator:paired` (base vs adapter on held-out cases, graded by one reward, with the
paired statistics), `evaluator:judge` (a pinned local judge comparing the two answers in both orders, for
benchmarking) and `evaluator:chat` (one reply to a conversation, for `stateset-agents chat`).

Registered by lazy "module:attr" paths: `plugins list` imports this module, which must not import torch.
"""
from __future__ import annotations

from stateset_agents import hookimpl

VERSION = "0.1.0"
_REQUIRES = ["torch", "transformers", "peft"]
_INSTALL = "pip install 'stateset-agents[train]'"

_CHILD_ENV = "stateset_plugins.models.allocator:allocator_env"  # a model-holding child starts on jemalloc if installed


@hookimpl
def register_evaluators(register):
    register("stateset_plugins.evaluators.paired:PairedEvaluator", name="paired", version=VERSION,
             requires=_REQUIRES, install=_INSTALL, child_env=_CHILD_ENV,
             capabilities=("paired", "eval_results", "statistics"))
    register("stateset_plugins.evaluators.judged:JudgeEvaluator", name="judge", version=VERSION,
             requires=_REQUIRES, install=_INSTALL, child_env=_CHILD_ENV,
             capabilities=("pairwise", "judge", "replay"))
    register("stateset_plugins.evaluators.chat:ChatEvaluator", name="chat", version=VERSION,
             requires=_REQUIRES, install=_INSTALL, child_env=_CHILD_ENV,
             capabilities=("chat", "model_cache"))
