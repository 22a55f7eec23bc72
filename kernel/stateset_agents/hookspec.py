"""Hook specifications: how a plugin adds components.

Each hook receives a `register` callback, so a plugin module adds any number of components of that kind:

    from stateset_agents import hookimpl

    @hookimpl
    def register_rewards(register):
        register(MyReward)                                    # a class, imported eagerly (light plugins)
        register("my_pkg.heavy:BigReward", name="big",        # or a lazy "module:attr" path, for components
                 version="1.0", requires=["torch"],           # whose dependencies may be missing
                 install="pip install 'my-pkg[torch]'")
"""
import pluggy

PROJECT = "stateset_agents"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_ingestors(register):
    """Register ingestor components (log format parsers)."""


@hookspec
def register_rewards(register):
    """Register reward components (offline graders)."""


@hookspec
def register_trainers(register):
    """Register trainer components (training objectives on the shared engine)."""


@hookspec
def register_evaluators(register):
    """Register evaluator components."""


@hookspec
def register_providers(register):
    """Register provider components (remote compute)."""


HOOK_FOR_KIND = {
    "ingestor": "register_ingestors",
    "reward": "register_rewards",
    "trainer": "register_trainers",
    "evaluator": "register_evaluators",
    "provider": "register_providers",
}
