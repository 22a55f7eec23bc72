"""First-party providers: where `train-remote` runs a job, each under the same cost cap (docs/remote.md).

Registered by lazy "module:attr" paths: `plugins list` imports this module, and no provider SDK may load then.
`river` runs out of process in the `river` image because its client needs Python 3.12+.
"""
from __future__ import annotations

from stateset_agents import hookimpl

VERSION = "0.1.0"
CAPABILITIES = ("quote", "idempotent_launch", "remote_deadline", "artifact_receipts")


@hookimpl
def register_providers(register):
    register("stateset_plugins.providers.local:LocalProvider", name="local", version=VERSION,
             capabilities=CAPABILITIES)
    register("stateset_plugins.providers.runpod:RunPodProvider", name="runpod", version=VERSION,
             requires=["runpod"], install="pip install 'stateset-agents[runpod]'", capabilities=CAPABILITIES)
    register("stateset_plugins.providers.modal:ModalProvider", name="modal", version=VERSION,
             requires=["modal"], install="pip install 'stateset-agents[modal]'", capabilities=CAPABILITIES)
    register("stateset_plugins.providers.river:RiverProvider", name="river", version=VERSION,
             requires=["river_client"],
             install="pip install 'stateset-agents[river]' (Python 3.12+; or use the `river` image)",
             capabilities=(*CAPABILITIES, "hosted_backend"))
