"""River's image (`stateset-agents images build river`): River's client needs Python 3.12+, so `provider:river`
runs out of process in an image of its own, every dependency travelling as a wheel (`register_images`)."""
from __future__ import annotations

from stateset_agents import hookimpl


@hookimpl
def register_images(register):
    register("river", dockerfile="images/river/Dockerfile", base="python:3.13-slim", components=["provider:river"],
             offline=True, help="provider:river, Python 3.13")
