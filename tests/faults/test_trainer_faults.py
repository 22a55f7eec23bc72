"""A trainer that is killed, hangs or answers garbage at its second step, in every runtime: the run fails closed
(a clear error naming the plugin and the call, never `completed`), and nothing claims the run is done (its
manifest is written only by a completed run)."""
from __future__ import annotations

import time

import pytest

from stateset_agents.cli import main
from stateset_agents.core.errors import PluginError
from stateset_agents.core.runtimes import load_component, wire
from stateset_agents.pipeline.training import raise_unless_completed

WHO = "trainer:test_fault"
TRAIN = "Trainer.Train"


def _train(tmp_path, out, fault: str | None) -> int:
    config = tmp_path / f"config-{fault}.yaml"
    config.write_text(f"fault: {fault}\nat: 2\n" if fault else "{}\n")
    dataset = tmp_path / "curated.jsonl"
    dataset.write_text('{"prompt": "p", "completion": "c"}\n')
    return main(["train", "--algorithm", WHO, "--dataset", str(dataset), "--output", str(out), "--config",
                 str(config), "--steps", "4"])


@pytest.mark.parametrize("fault, says", [("raise", "asked to fail at step 2"), ("wrong_type", "not an event object"),
                                         ("untyped", "not an event object with a type")])
def test_train_in_process(tmp_path, capsys, fault, says):
    assert _train(tmp_path, tmp_path / "good", None) == 0
    assert (tmp_path / "good" / "manifest.json").is_file()
    capsys.readouterr()
    code = _train(tmp_path, tmp_path / "bad", fault)
    err = " ".join(capsys.readouterr().err.split())
    assert code != 0 and f"plugin {WHO} failed in" in err and says in err, err
    assert not (tmp_path / "bad" / "manifest.json").exists()


def _run(runtime: str, out, fault: str, **options) -> list[dict]:
    events = []
    with load_component(WHO, runtime=runtime, **options) as trainer:
        for event in trainer.run({"output": str(out), "steps": 4, "config": {"fault": fault, "at": 2}}):
            events.append(event)
    raise_unless_completed(events[-1])  # what every face does with the last event
    return events


@pytest.mark.parametrize("fault, says", [
    ("die", "exited with code -9"),
    ("raise", "asked to fail at step 2"),
    ("wrong_type", "not an event object"),
    ("untyped", "no type"),
    ("malformed", "malformed event"),
])
def test_subprocess(tmp_path, fault, says):
    out = tmp_path / "out"
    with load_component(WHO, runtime="subprocess") as trainer:
        with pytest.raises(PluginError) as err:
            for event in trainer.run({"output": str(out), "steps": 4, "config": {"fault": fault, "at": 2}}):
                assert event["type"] == "metrics"
        # the plugin is still up: its work must have stopped with the stream, not gone on to claim completion
        time.sleep(0.6)  # two more steps of 0.1 s would have finished by now
        assert not (out / "manifest.json").exists()
    assert f"plugin {WHO} failed in {TRAIN}" in str(err.value) and says in str(err.value), str(err.value)


def test_subprocess_hang_fails_though_heartbeats_go_on(tmp_path, monkeypatch):
    monkeypatch.setenv("STATESET_PLUGIN_HEARTBEAT_S", "0.2")  # the plugin's, read as it starts
    monkeypatch.setattr(wire, "PROGRESS_TIMEOUT_SECONDS", 1.5)
    started = time.monotonic()
    with pytest.raises(PluginError, match=rf"{WHO} failed in {TRAIN}: only heartbeats for 1.5s"):
        _run("subprocess", tmp_path / "out", "hang")
    assert time.monotonic() - started < 20
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.container
def test_container_killed_mid_stream(tmp_path, faults_image):
    with pytest.raises(PluginError, match=rf"{WHO} failed in {TRAIN}: .*exited with code"):
        _run("container", tmp_path / "out", "die", gpus=0)
    assert not (tmp_path / "out" / "manifest.json").exists()
