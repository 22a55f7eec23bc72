"""Hook specifications: how a plugin adds components, the command-line options they take, and their images.

Each hook receives a `register` callback, so a plugin module adds any number of components of that kind:

    from stateset_agents import hookimpl

    @hookimpl
    def register_rewards(register):
        register(MyReward)                                    # a class, imported eagerly (light plugins)
        register("my_pkg.heavy:BigReward", name="big",        # or a lazy "module:attr" path, for components
                 version="1.0", requires=["torch"],           # whose dependencies may be missing
                 install="pip install 'my-pkg[torch]'", capabilities=["local"])

``child_env="my_pkg.env:child_env"`` names a function of the parent's environment returning the variables a child
process that runs the component starts with (the subprocess runtime adds them before the child starts: an
allocator to preload, a thread count); the trainers plugin uses it to start training on jemalloc.

A face offers what components declare in `capabilities`, never a list of names. The capabilities faces read:

* trainer: ``local`` (`train` runs it on this machine), ``remote`` (`train-remote` and `finetune` run it on a
  provider), ``gpu`` (it needs a GPU).
  A trainer that declares neither ``local`` nor ``remote`` (registered before these existed) runs locally.
* provider: ``chat`` (`chat-remote` can open a session on it), ``this_machine`` (it runs jobs here and bills
  nothing: the default `--provider`), ``hosted_backend`` (it hosts the model for the engine's backend seam).
* evaluator: ``paired`` (base vs adapter on held-out cases: `train`, `evaluate`, `gate`), ``judge`` (pairwise
  judging, `evaluate --judge-model`), ``chat`` (one reply to a conversation: `chat`, `chat-remote`).

`register_options` and `register_images` are not component kinds: they add to the faces (in the manner of pytest's
`pytest_addoption`), so that a plugin's flags and images live in the plugin.
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


@hookspec
def register_options(register):
    """Register command-line options that some components take; each value becomes a field of the component's
    config (for `train`: an objective field), typed by a JSON Schema type:

        register("train", "--judge-model", field="judge_model", type="string", components=["trainer:my_judged"],
                 help="Local judge model (path, .gguf or hub id).")

    `type` is one of string, integer, number, boolean, path (a string naming a file). `components` lists the
    `KIND:NAME`s that take the option; another component given it is refused before anything loads. The option
    is listed in the command's `--help`, and its field's schema joins the command's config schema."""


@hookspec
def register_images(register):
    """Register container image roles (`stateset-agents images build ROLE`):

        register("trainer", dockerfile="images/trainer/Dockerfile", base="nvidia/cuda:...",
                 kinds=["trainer", "reward", "evaluator"], offline=False, gpu_base="Dockerfile.gpu",
                 stacks={"cuda": {"TORCH": "torch==2.14.0", ...}, "cpu": {...}})

    `dockerfile` (and `gpu_base`) are paths in the project checkout the image is built from; `kinds` and
    `components` (full names) say which available components the image serves; `offline`: its dependencies travel
    as wheels, so the build fetches nothing; `gpu_base` is built first, with one of `stacks` as its build
    arguments (`cuda` by default, `cpu` with `--cpu`)."""


@hookspec
def register_serving(register):
    """Register serving engines (`stateset-agents serve`: the model behind the gateway):

        register("my_engine", target="my_pkg.serve:create", requires=["torch"], install="pip install ...",
                 help="...")

    `target` is a factory ``create(config) -> engine`` (`stateset_agents.plugin_api.serving` documents both);
    it is imported only when `serve` starts."""


@hookspec
def register_recipes(register):
    """Register industry recipes (`stateset-agents industry list | show | prepare`):

        register("my_pkg.recipe:RECIPE", name="claims", version="1.0.0", summary="Insurance claims")

    The target ("module:attr", imported only when the recipe is shown or prepared) is an object with `tools` (OpenAI
    tool schemas), `policy` (the policy file's YAML text), `policy_text` (the policy in prose, Markdown), `rewards`
    (reward configs: `[{"reward": NAME, "config": {...}, "policy": bool}, ...]`, the first one the loop's),
    `log_format` (the ingestor that reads what `generate` yields) and `generate(size, seed)`, which yields
    conversations (`{"id", "messages", "tools", "metadata"}`), each with `metadata.customer_id` and
    `metadata.label` (what the conversation shows). docs/industry.md documents it."""


HOOK_FOR_KIND = {
    "ingestor": "register_ingestors",
    "reward": "register_rewards",
    "trainer": "register_trainers",
    "evaluator": "register_evaluators",
    "provider": "register_providers",
}
