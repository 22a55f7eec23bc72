"""`trainer:rloo`: the RLOO objective on the shared training engine. The entry point's module: it imports no torch
(`plugins list` and `--help` load it), and names the objective by its "module:attr" path."""
from stateset_agents import hookimpl
from stateset_plugins.trainers.objectives import register_objective


@hookimpl
def register_trainers(register):
    # "remote": train-remote may run it too (a provider's worker runs the same engine)
    register_objective(register, "stateset_trainer_rloo.objective:RLOO", name="rloo", version="0.1.0",
                       capabilities=["remote"])
