"""The trainer image (`stateset-agents images build trainer`), declared by the plugin whose trainers it serves
(`register_images`). It is built on `Dockerfile.gpu` (torch, vLLM and transformers pinned together, the kernel and
every first-party plugin), with the rewards and evaluators inside so a remote trainer scores without calling home.
"""
from __future__ import annotations

from stateset_agents import hookimpl

#: Dockerfile.gpu's build arguments. GPU: what vLLM 0.33.0 requires (torch==2.14.0, transformers>=5.16.1,<5.21;
#: PyPI's torch 2.14.0 is the CUDA 13.0 build), installed from the index in the build. CPU (`--cpu`, for tests): the
#: CPU torch wheel the project's setup installs, no vLLM, the same transformers range, every wheel collected on the
#: host.
STACKS = {
    "cuda": {"TORCH": "torch==2.14.0", "VLLM": "vllm==0.33.*", "TRANSFORMERS": "transformers>=5.16.1,<5.21"},
    "cpu": {"TORCH": "torch==2.13.0+cpu", "VLLM": "", "TRANSFORMERS": "transformers>=5.16.1,<5.21"},
}


@hookimpl
def register_images(register):
    register("trainer", dockerfile="images/trainer/Dockerfile", base="nvidia/cuda:13.0.0-base-ubuntu24.04",
             gpu_base="Dockerfile.gpu", stacks=STACKS, kinds=["trainer", "reward", "evaluator"], offline=False,
             help="GPU, from Dockerfile.gpu")
