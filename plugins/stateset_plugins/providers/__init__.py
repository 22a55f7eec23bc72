"""First-party providers: where `train-remote` runs a job, each under the same cost cap (docs/remote.md).

Registered by lazy "module:attr" paths: `plugins list` imports this module, and no provider SDK may load then.
Capabilities the faces read: every one can `chat` (`chat-remote`); `local` is the `default` (it runs the job on
this machine and bills nothing); `river` is a `hosted_backend` and runs out of process in its own image (its client
needs Python 3.12+; the image is declared in `images`).
"""
from __future__ import annotations

from stateset_agents import hookimpl

from .images import register_images  # noqa: F401 - a hook implementation: pluggy finds it on this module

VERSION = "0.1.0"
CAPABILITIES = ("quote", "idempotent_launch", "remote_deadline", "artifact_receipts", "chat")


@hookimpl
def register_providers(register):
    register("stateset_plugins.providers.local:LocalProvider", name="local", version=VERSION,
             capabilities=(*CAPABILITIES, "default"))
    register("stateset_plugins.providers.runpod:RunPodProvider", name="runpod", version=VERSION,
             requires=["runpod"], install="pip install 'stateset-agents[runpod]'", capabilities=CAPABILITIES)
    register("stateset_plugins.providers.modal:ModalProvider", name="modal", version=VERSION,
             requires=["modal"], install="pip install 'stateset-agents[modal]'", capabilities=CAPABILITIES)
    register("stateset_plugins.providers.river.provider:RiverProvider", name="river", version=VERSION,
             requires=["river_client"],
             install="pip install 'stateset-agents[river]' (Python 3.12+; or use the `river` image)",
             capabilities=(*CAPABILITIES, "hosted_backend"))
