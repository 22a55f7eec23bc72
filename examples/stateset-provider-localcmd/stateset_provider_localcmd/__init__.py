"""`provider:localcmd`: `train-remote` jobs run through a command on this machine, priced by the hour you set."""
from stateset_agents import hookimpl

from .provider import LocalCommandProvider


@hookimpl
def register_providers(register):
    register(LocalCommandProvider)
