"""External engines as fail-closed trainer plugins: `trainer:verl` (0.9.1), `trainer:openrlhf` (0.11.2) and
`trainer:nemo_rl` (render-only). Each renders a plan into the engine's own inputs under a canonical experiment
digest, refuses any engine version but the one it was conformance-tested against, runs the engine in its own venv
(`scripts/engine-venvs`) or image (`images build verl` / `openrlhf`), and serves our reward plugins through the
engine's reward interface. This module imports nothing heavy: `plugins list` loads it.
"""
from __future__ import annotations

from stateset_agents import hookimpl

VERSION = "0.1.0"
_COMPONENTS = {"verl": "VerlTrainer", "openrlhf": "OpenRLHFTrainer", "nemo_rl": "NemoRLTrainer"}
_ALL = [f"trainer:{name}" for name in _COMPONENTS]
_CAPABILITIES = ["local", "gpu", "external_engine"]


@hookimpl
def register_trainers(register):
    for name, cls in _COMPONENTS.items():
        register(f"{__name__}.component:{cls}", name=name, version=VERSION, capabilities=_CAPABILITIES,
                 requires=["pyarrow"] if name == "verl" else [], install="pip install pyarrow")


@hookimpl
def register_options(register):
    register("train", "--engine-algorithm", field="engine_algorithm", components=_ALL,
             help="The engine's algorithm: grpo, ppo, gspo or dapo (nemo_rl: grpo).")
    register("train", "--model-revision", field="model_revision", components=_ALL,
             help="The model's revision (a hub commit or tag), recorded in the experiment digest.")
    register("train", "--render-only", field="render_only", type="boolean", components=_ALL,
             help="Write the engine's inputs and the experiment digest, train nothing.")
    register("train", "--engine-python", field="engine_python", type="path", components=_ALL[:2],
             help="The engine venv's Python (default: the venv scripts/engine-venvs builds).")


@hookimpl
def register_images(register):
    from .pins import ENGINES

    for name in ("verl", "openrlhf"):
        spec = ENGINES[name]
        register(name, dockerfile=f"images/{name}/Dockerfile", base="nvidia/cuda:13.0.0-base-ubuntu24.04",
                 components=[f"trainer:{name}"], offline=False,
                 help=f"GPU, {spec.package}=={spec.version} in its own venv beside the kernel")
