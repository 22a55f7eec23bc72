"""`provider:localcmd`: `train-remote` jobs run through a command on this machine, priced by the hour you set.

Registered by its "module:attr" path, so listing the components (`plugins list`, every `--help`) does not import
the provider; the registration repeats the class's name, version and capabilities."""
from stateset_agents import hookimpl


@hookimpl
def register_providers(register):
    register("stateset_provider_localcmd.provider:LocalCommandProvider", name="localcmd", version="0.1.0",
             capabilities=("quote", "idempotent_launch", "remote_deadline", "artifact_receipts"))
