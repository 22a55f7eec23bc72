"""A third party's industry recipe: registered through this package's own entry point, named nowhere else."""
from stateset_agents import hookimpl


@hookimpl
def register_recipes(register):
    register("stateset_recipe_pharmacy.recipe:RECIPE", name="pharmacy", version="0.1.0",
             summary="Pharmacy refills: prescription lookups, refills, hand-offs to a pharmacist")
