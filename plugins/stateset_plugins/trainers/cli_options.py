"""The trainers plugin's own `train` flags: rlaif's judge (`register_options`). Each value is a field of the rlaif
objective's config (`objectives/rlaif.py`); the kernel lists the flags in `train --help` and refuses them for any
other trainer. Light: imported with the plugin, it imports nothing of the objectives."""
from __future__ import annotations

from stateset_agents import hookimpl

_RLAIF = ["trainer:rlaif"]


@hookimpl
def register_options(register):
    register("train", "--judge-model", field="judge_model", components=_RLAIF,
             help="The judge: a local causal LM (path, .gguf or hub id).")
    register("train", "--judge-url", field="judge_url", components=_RLAIF,
             help="The judge: an OpenAI-compatible endpoint (base URL, e.g. http://host/v1).")
    register("train", "--rubric", field="rubric", type="path", components=_RLAIF,
             help="The judge's rubric (a text file).")
