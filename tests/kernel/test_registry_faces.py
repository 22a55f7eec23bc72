"""What the faces offer comes from the registry: choices and defaults from capabilities, a plugin's own flags
(`register_options`) and image roles (`register_images`), the remote config's schema. Each test builds a registry of
toy components (a third party's, as the faces see it) or asks the installed one."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stateset_agents import Provider, Trainer
from stateset_agents.core.errors import StatesetError, UnknownComponent
from stateset_agents.core.registry import Registry, _make_image_register, _make_option_register, _make_register

SEEN: list[dict] = []  # the requests the toy trainer ran


class ToyTrainer(Trainer):
    name, version, capabilities = "toy", "1.0.0", ("local", "remote", "default")

    def run(self, request):
        SEEN.append(dict(request))
        yield {"type": "completed", "step": 0, "run_id": "toy-run"}


class OldTrainer(Trainer):  # registered before placements were declared
    name, version = "old", "0.1.0"


class FarTrainer(Trainer):
    name, version, capabilities = "far", "1.0.0", ("remote", "default:train-remote")


class HereProvider(Provider):
    name, version, capabilities = "here", "1.0.0", ("chat", "default")


class MuteProvider(Provider):
    name, version = "mute", "1.0.0"


def toy_registry(*, options=(), images=()) -> Registry:
    registry = Registry()
    for cls in (ToyTrainer, OldTrainer, FarTrainer):
        _make_register(registry, "trainer", "toyplugin", "toy-pkg")(cls)
    for cls in (HereProvider, MuteProvider):
        _make_register(registry, "provider", "toyplugin", "toy-pkg")(cls)
    register = _make_option_register(registry, "toyplugin")
    for args, kwargs in options:
        register(*args, **kwargs)
    register_image = _make_image_register(registry, "toyplugin")
    for args, kwargs in images:
        register_image(*args, **kwargs)
    return registry


TOY_OPTION = (("train", "--toy-temperature"), {"type": "number", "components": ["trainer:toy"],
                                                 "help": "The toy objective's temperature."})


@pytest.fixture()
def toy(monkeypatch):
    from stateset_agents.core import registry as reg

    def install(registry: Registry) -> Registry:
        monkeypatch.setattr(reg, "_cached", registry)
        return registry

    SEEN.clear()
    return install


# ------------------------------------------------------------------------------------------------ capabilities


def test_choices_and_defaults_come_from_capabilities():
    registry = toy_registry()
    assert registry.names("trainer", "local") == ["old", "toy"]  # "old" declares no placement: it runs here
    assert registry.names("trainer", "remote") == ["far", "toy"]
    assert registry.default("trainer", "local", face="train") == "toy"
    assert registry.default("trainer", "remote", face="train-remote") == "far"  # default:FACE wins over default
    assert registry.default("provider") == "here"
    alone = Registry()
    _make_register(alone, "provider", "p", "pkg")(MuteProvider)
    assert alone.default("provider") == "mute"  # the only one installed
    _make_register(alone, "provider", "q", "pkg")("pkg.mod:Other", name="other")
    assert alone.default("provider") is None  # two, neither declared: the face asks


def test_a_component_is_found_by_what_it_offers_and_refused_where_it_lacks_it():
    registry = toy_registry()
    assert registry.offering("provider", "chat").full_name == "provider:here"
    with pytest.raises(UnknownComponent, match="no installed trainer offers 'gpu'"):
        registry.offering("trainer", "gpu")
    with pytest.raises(UnknownComponent, match="several trainers offer 'remote': trainer:far, trainer:toy"):
        registry.offering("trainer", "remote")
    with pytest.raises(UnknownComponent, match="provider:mute does not declare 'chat'.*those that do: here"):
        registry.require("mute", "provider", "chat", "chat-remote")


def test_the_installed_faces_read_the_first_party_capabilities(registry):
    assert {"sft", "grpo", "dapo"} <= set(registry.names("trainer", "remote"))
    assert registry.default("trainer", "local", face="train") == "grpo"
    assert registry.default("trainer", "remote", face="train-remote") == "sft"
    assert registry.default("provider", face="train-remote") == "local"
    assert {"local", "runpod", "modal", "river"} <= set(registry.names("provider", "chat"))
    for capability, name in (("paired", "paired"), ("judge", "judge"), ("chat", "chat")):
        assert registry.offering("evaluator", capability).name == name


# ---------------------------------------------------------------------------------------------- plugin options


def test_option_registrations_are_checked():
    register = _make_option_register(Registry(), "p")
    register("train", "--x-y", components=["trainer:a"])
    for args, kwargs, match in [(("train", "x"), {}, "spelled --NAME"),
                                (("train", "--z"), {"type": "float"}, "not one of string"),
                                (("train", "--w"), {"components": ["a"]}, "KIND:NAME"),
                                (("train", "--x-y"), {}, "registered twice")]:
        with pytest.raises(StatesetError, match=match):
            register(*args, **kwargs)


def test_train_help_lists_the_installed_trainers_and_the_plugins_flags(capsys, monkeypatch):
    from stateset_agents.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "grpo (default)" in out and "multi_turn_grpo" in out
    assert "Options of trainer:rlaif" in out
    for flag in ("--judge-model", "--judge-url", "--rubric"):
        assert flag in out


def test_a_plugins_flag_given_to_a_trainer_that_does_not_take_it_is_refused_before_anything_loads(tmp_path):
    code = ("import sys; from stateset_agents.cli import main; "
            f"rc = main(['train', '--dataset', 'd.jsonl', '--output', {str(tmp_path / 'r')!r}, '--algorithm', "
            "'grpo', '--reward', 'gsm8k', '--judge-url', 'http://x/v1']); "
            "print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["2", "False"], out.stderr
    message = " ".join(out.stderr.split())
    assert "the grpo objective does not use 'judge_url' (--judge-url is an option of trainer:rlaif)" in message


def test_a_third_partys_flag_reaches_its_trainer_as_a_config_field(toy, tmp_path, capsys, monkeypatch):
    from stateset_agents.cli import main

    toy(toy_registry(options=[TOY_OPTION]))
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Options of trainer:toy" in out and "--toy-temperature" in out and "old, toy (default)" in out
    assert main(["train", "--dataset", str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "r"),
                 "--toy-temperature", "0.25"]) == 0
    assert SEEN[-1]["config"] == {"toy_temperature": 0.25}
    assert main(["train", "--dataset", "d", "--output", "o", "--algorithm", "old", "--toy-temperature", "1"]) == 2
    assert "the old objective does not use 'toy_temperature'" in " ".join(capsys.readouterr().err.split())
    assert main(["train", "--dataset", "d", "--output", "o", "--algorithm", "far"]) != 0  # remote only
    assert "trainer:far does not declare 'local'" in " ".join(capsys.readouterr().err.split())


def test_a_plugin_flag_that_clashes_with_the_commands_own_is_a_clear_error(toy, capsys):
    from stateset_agents.cli import main

    toy(toy_registry(options=[(("train", "--reward"), {"components": ["trainer:toy"]})]))
    assert main(["train", "--help"]) != 0
    assert "plugin toyplugin adds --reward to `train`, which has that option already" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ remote config


def test_the_remote_config_schema_is_built_from_the_registry():
    from stateset_agents.remote import config as cfg

    registry = toy_registry(options=[(("train-remote", "--toy-depth"), {"type": "integer"})])
    schema = cfg.schema(registry)
    props = schema["properties"]
    assert props["provider"]["enum"] == ["here", "mute"] and props["provider"]["default"] == "here"
    assert props["algorithm"]["enum"] == ["far", "toy"] and props["algorithm"]["default"] == "far"
    assert props["training"]["properties"] == {"toy_depth": {"type": "integer"}}
    assert schema["required"] == ["dataset"]
    lonely = Registry()
    for name in ("a", "b"):
        _make_register(lonely, "provider", "p", "pkg")(f"pkg.mod:{name.upper()}", name=name)
    assert "provider" in cfg.schema(lonely)["required"]  # no single default: the config names one


def test_the_installed_remote_schema_and_its_validation(registry):
    from stateset_agents.remote import config as cfg

    props = cfg.schema()["properties"]
    assert {"local", "runpod", "modal", "river"} <= set(props["provider"]["enum"])
    assert props["algorithm"]["default"] == "sft" and "rlaif" not in props["algorithm"]["enum"]
    errors = dict(cfg.validation_errors({"dataset": "x", "provider": "nowhere", "algorithm": "rlaif"}))
    assert "is not one of" in errors["provider"] and "is not one of" in errors["algorithm"]


def test_finetune_schema_prints_the_installed_choices():
    out = subprocess.run([sys.executable, "-m", "stateset_agents", "finetune", "schema"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    props = json.loads(out.stdout)["properties"]
    assert "local" in props["provider"]["enum"] and "sft" in props["algorithm"]["enum"]


# ------------------------------------------------------------------------------------------------------- images


def test_image_roles_come_from_the_plugins_and_the_kernel_keeps_only_the_generic_one():
    from stateset_agents.cli.images_cmd import roles, trainer_stack

    stacks = {"cuda": {"TORCH": "torch==9", "VLLM": "vllm==1", "TRANSFORMERS": "t"}}
    registry = toy_registry(images=[(("gpu-role",), {"dockerfile": "d", "base": "b", "kinds": ["trainer"],
                                                      "gpu_base": "Dockerfile.gpu", "stacks": stacks,
                                                      "offline": False}),
                                    (("solo",), {"dockerfile": "d2", "base": "b2", "components": ["provider:here"]})])
    known = roles(registry)
    assert list(known) == ["plugins", "gpu-role", "solo"]
    assert known["solo"].serves({"available": True, "kind": "provider", "component": "provider:here"})
    assert not known["solo"].serves({"available": True, "kind": "provider", "component": "provider:mute"})
    assert not known["plugins"].serves({"available": False, "kind": "reward", "component": "reward:x"})
    assert trainer_stack(cpu=False, spec=known["gpu-role"])["TORCH"] == "torch==9"
    with pytest.raises(StatesetError, match="declares no cpu stack"):
        trainer_stack(cpu=True, spec=known["gpu-role"])
    with pytest.raises(StatesetError, match="no 'cuda' stack"):
        _make_image_register(Registry(), "p")("bad", dockerfile="d", base="b", gpu_base="G", stacks={})
    clash = toy_registry(images=[(("plugins",), {"dockerfile": "d", "base": "b"})])
    with pytest.raises(StatesetError, match="declares the image role 'plugins', which is the kernel's"):
        roles(clash)


def test_the_installed_roles_are_declared_by_their_plugins(registry):
    from stateset_agents.cli.images_cmd import roles

    known = roles(registry)
    assert {"plugins", "trainer", "river"} <= set(known)
    assert known["trainer"].plugin == "trainers" and known["trainer"].gpu_base == "Dockerfile.gpu"
    assert known["river"].plugin == "providers" and known["river"].components == ("provider:river",)
    assert known["plugins"].plugin == "(kernel)"


# -------------------------------------------------------------------------------------------------- chat, costs


def test_chat_remote_refuses_a_provider_that_does_not_chat(toy, capsys):
    from stateset_agents.cli import main

    toy(toy_registry())
    assert main(["chat-remote", "--provider", "mute", "--run", "r", "--max-cost", "1"]) != 0
    assert "provider:mute does not declare 'chat', which chat-remote needs" in " ".join(
        capsys.readouterr().err.split())
