"""`train-remote` as a new user meets it: the seed's command run as printed (only RUNPOD_API_KEY set, RunPod through
its real SDK against the local GraphQL fake) reaches the quote with and without an image; the quote and the cap
check come before the image check; --image, the image `images pin` recorded, and --plan-only without credentials
(RunPod's dated fallback price, Modal's dated table)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stateset_agents.cli import main
from stateset_agents.remote import state
from tests.providers.fake_modal import fake_modal  # noqa: F401 - the fixture
from tests.providers.provider_helpers import IMAGE

SEED = ["train-remote", "--provider", "runpod", "--dataset", "improved/curated.jsonl", "--base-model", "M",
        "--eval-prompts", "held_out.txt", "--max-cost", "5"]
PUSHED = "registry.example/team/stateset-agents-trainer@sha256:" + "cd" * 32


@pytest.fixture()
def seed_dir(tmp_path, monkeypatch):
    """The seed's working directory: improved/curated.jsonl from `improve run`, a plain prompts file, no images."""
    (tmp_path / "improved").mkdir()
    rows = [{"prompt": [{"role": "user", "content": f"what is {i} + 1"}],
             "completion": [{"role": "assistant", "content": f"it is {i + 1}"}]} for i in range(4)]
    (tmp_path / "improved" / "curated.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "held_out.txt").write_text("what is 7 + 8\nname a prime\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STATESET_AGENTS_IMAGES", str(tmp_path / "images.json"))
    return tmp_path


def _record_trainer_image(pinned: str | None = None) -> None:
    """What `images build trainer` records (an image id, no registry digest), then `images pin` when given."""
    record = {"role": "trainer", "tag": "stateset-agents-trainer:0.1.0", "id": "sha256:" + "ef" * 32,
              "components": ["trainer:grpo", "trainer:sft"], "repo_digests": []}
    path = Path(os.environ["STATESET_AGENTS_IMAGES"])
    path.write_text(json.dumps({"schema_version": 1, "images": {"trainer": record}}))
    if pinned:
        assert main(["images", "pin", "trainer", pinned]) == 0


def _err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())  # an error message may wrap: compare words


def _no_plan() -> bool:
    ws = state.state_dir() / "workspaces"
    return not ws.exists() or not [p for p in ws.iterdir() if not p.name.startswith(".")]


def test_the_seed_command_reaches_the_quote_without_an_image(fake_runpod, seed_dir, capsys):
    assert main(SEED) == 2
    err = _err(capsys)
    # the quote first: the documented default GPU, the live price, the cap
    assert "quote (runpod)" in err and "NVIDIA A100 80GB PCIe x1 (runpod's default; --gpu chooses another)" in err
    assert "$1.6400/GPU-hour x 1 x 2 h" in err and "gpuTypes(NVIDIA A100 80GB PCIe).securePrice" in err
    assert "$3.29 / $5.00 (within the cap)" in err
    # then the image check, with both ways to get one
    assert "none is given or recorded" in err and "(1) pass --image NAME@sha256:DIGEST" in err
    assert "(2) build, push and pin the image that holds trainer:sft: `stateset-agents images build trainer`" in err
    assert "`stateset-agents images pin trainer`" in err
    assert fake_runpod.creates == 0 and _no_plan()


def test_the_seed_command_as_a_subprocess(fake_runpod, seed_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "MODAL_", "RIVER_"))}
    env.update(RUNPOD_API_KEY="test-key", RUNPOD_API_BASE_URL=fake_runpod.api_url)
    cli = Path(sys.executable).parent / "stateset-agents"  # the installed command, as a user runs it
    done = subprocess.run([str(cli), *SEED], env=env, capture_output=True, text=True, timeout=120)
    err = " ".join(done.stderr.split())
    assert done.returncode == 2 and "$3.29 / $5.00 (within the cap)" in err and "(1) pass --image" in err, err
    assert fake_runpod.creates == 0


def test_the_seed_command_with_a_pinned_image_launches_it(fake_runpod, seed_dir, capsys):
    _record_trainer_image(pinned=PUSHED)
    capsys.readouterr()
    fake_runpod.exit_on_create = True  # the pod's container ends at once: the run fails fast, and is booked
    assert main(SEED) == 1
    err = _err(capsys)
    assert f"{PUSHED} (the trainer image, pinned by `images pin trainer`)" in err
    assert "$3.29 / $5.00 (within the cap)" in err and "launched job pod001" in err
    [pod] = fake_runpod.pods.values() if fake_runpod.pods else [None]
    assert pod is None and fake_runpod.creates == 1 and fake_runpod.terminated == ["pod001"]
    [record] = state.all_records()
    plan = json.loads((Path(record["workspace"]) / "plan.json").read_text())
    assert plan["image"]["ref"] == PUSHED and plan["config"]["image"] == PUSHED
    assert state.read_ledger()[-1]["outcome"] == "failed"


def test_a_built_but_unpushed_image_says_what_to_do(fake_runpod, seed_dir, capsys):
    _record_trainer_image()
    assert main(SEED) == 2
    err = _err(capsys)
    assert "$3.29 / $5.00" in err and "push the trainer image built here (stateset-agents-trainer:0.1.0" in err
    assert "then record its registry digest: `stateset-agents images pin trainer`" in err
    assert fake_runpod.creates == 0


def test_the_image_flag_and_an_unpinned_one(fake_runpod, seed_dir, capsys):
    _record_trainer_image(pinned=PUSHED)
    assert main([*SEED, "--image", IMAGE, "--plan-only"]) == 0
    [ws] = [p for p in (state.state_dir() / "workspaces").iterdir() if not p.name.startswith(".")]
    assert json.loads((ws / "plan.json").read_text())["image"]["ref"] == IMAGE  # the flag wins over the record
    capsys.readouterr()
    assert main([*SEED, "--image", "ghcr.io/x/trainer:latest", "--plan-only"]) == 2
    err = _err(capsys)
    assert "$3.29 / $5.00" in err and "the one given (ghcr.io/x/trainer:latest) is not pinned by digest" in err
    assert f"(2) leave --image and `image` out to run the trainer image pinned here ({PUSHED})" in err
    assert fake_runpod.creates == 0


def test_the_cap_refusal_shows_the_quote_first(fake_runpod, seed_dir, capsys):
    assert main([*SEED[:-1], "1"]) == 4
    err = _err(capsys)
    assert "$3.29 / $1.00 (ABOVE the cap)" in err and "refusing: the worst case is above --max-cost $1.00" in err
    assert "image" in err and fake_runpod.creates == 0 and _no_plan()


def test_plan_only_without_a_key_shows_the_dated_fallback(fake_runpod, seed_dir, capsys, monkeypatch):
    from stateset_plugins.providers import runpod

    monkeypatch.delenv("RUNPOD_API_KEY")
    _record_trainer_image(pinned=PUSHED)
    capsys.readouterr()
    assert main([*SEED, "--plan-only"]) == 0
    err = _err(capsys)
    fallback = runpod.FALLBACK["SECURE"][runpod.DEFAULT_GPU]
    assert f"${fallback:.4f}/GPU-hour" in err and "runpod dated fallback, not a live price" in err
    assert f"as of {runpod.FALLBACK_AS_OF}" in err and "RUNPOD_API_KEY is not set, so this is not a live price" in err
    [ws] = [p for p in (state.state_dir() / "workspaces").iterdir() if not p.name.startswith(".")]
    assert json.loads((ws / "plan.json").read_text())["quote"]["live"] is False
    # a real launch needs the key: refused after the same quote, nothing rented
    assert main(SEED) == 2
    err = _err(capsys)
    assert "dated fallback, not a live price" in err and "a launch needs it and re-quotes" in err
    assert "nothing was rented" in err and fake_runpod.creates == 0


def test_modal_plan_only_without_credentials(fake_modal, seed_dir, capsys, monkeypatch):
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(name)
    argv = ["train-remote", "--provider", "modal", "--dataset", "improved/curated.jsonl", "--gpu", "A10G",
            "--max-cost", "5", "--image", IMAGE, "--plan-only"]
    assert main(argv) == 0
    err = _err(capsys)
    assert "$1.5000/GPU-hour" in err and "modal rate table as of 2025-06-01" in err
    assert fake_modal.spawns == [] and fake_modal.runs == {}


def test_images_pin_records_what_is_true(seed_dir, capsys):
    _record_trainer_image()
    assert main(["images", "pin", "trainer", "not-a-digest"]) == 2
    assert "not a registry digest" in _err(capsys)
    assert main(["images", "pin", "nope", PUSHED]) == 2
    assert "no nope image is recorded" in _err(capsys)
    assert main(["images", "pin", "trainer", PUSHED]) == 0
    record = json.loads(Path(os.environ["STATESET_AGENTS_IMAGES"]).read_text())["images"]["trainer"]
    assert record["pinned"] == PUSHED and record["id"] == "sha256:" + "ef" * 32  # the image id kept as it is
    assert record["pinned_source"].startswith("given; not checked")  # no docker daemon here to compare with
    capsys.readouterr()
    assert main(["images", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trainer"]["pinned"] == PUSHED


@pytest.fixture()
def fake_docker(monkeypatch):
    """Just enough of the Docker Engine API for `images pin` (version, ping, image inspect), served on loopback and
    reached through the real docker SDK (DOCKER_HOST)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    pytest.importorskip("docker")
    from stateset_agents.core.runtimes import container

    images: dict[str, dict] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            path = self.path.split("?")[0]
            if path.endswith("/version"):
                body = {"ApiVersion": "1.45", "Version": "26.1.0", "MinAPIVersion": "1.24"}
            elif path.endswith("/_ping"):
                body = "OK"
            elif "/images/" in path and path.endswith("/json"):
                body = images.get(path.split("/images/", 1)[1][:-len("/json")])
            else:
                body = None
            data = (body if isinstance(body, str) else json.dumps(body or {"message": "no such image"})).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(container, "_client", None)  # the runtime caches its client: this test gets its own
    yield images
    server.shutdown()


def test_images_pin_reads_the_pushed_digest_from_repo_digests(seed_dir, fake_docker, capsys):
    _record_trainer_image()
    image_id = "sha256:" + "ef" * 32
    fake_docker[image_id] = {"Id": image_id, "RepoDigests": []}  # built here, never pushed
    assert main(["images", "pin", "trainer"]) == 2
    err = _err(capsys)
    assert "has no registry digest: it was built here and not pushed" in err and "docker push" in err
    fake_docker[image_id]["RepoDigests"] = [PUSHED]  # after `docker push`
    assert main(["images", "pin", "trainer"]) == 0
    record = json.loads(Path(os.environ["STATESET_AGENTS_IMAGES"]).read_text())["images"]["trainer"]
    assert record["pinned"] == PUSHED and record["pinned_source"] == f"RepoDigests of {image_id}"
    other = "registry.example/else@sha256:" + "01" * 32
    assert main(["images", "pin", "trainer", other]) == 0
    record = json.loads(Path(os.environ["STATESET_AGENTS_IMAGES"]).read_text())["images"]["trainer"]
    assert record["pinned"] == other and "not among the RepoDigests" in record["pinned_source"]
    fake_docker[image_id]["RepoDigests"] = [PUSHED, other]
    assert main(["images", "pin", "trainer"]) == 2 and "has 2 registry digests" in _err(capsys)


def test_finetune_prepare_resolves_the_image_as_plan_only_does(fake_runpod, seed_dir, capsys):
    config = seed_dir / "remote.yaml"
    config.write_text("provider: runpod\ndataset: improved/curated.jsonl\nmax_cost_usd: 5\n")
    assert main(["finetune", "prepare", "--config", str(config), "--workspace", str(seed_dir / "ws")]) == 2
    assert "$3.29 / $5.00" in _err(capsys) and not (seed_dir / "ws" / "plan.json").exists()
    _record_trainer_image(pinned=PUSHED)
    assert main(["finetune", "prepare", "--config", str(config), "--workspace", str(seed_dir / "ws")]) == 0
    assert json.loads((seed_dir / "ws" / "plan.json").read_text())["image"]["ref"] == PUSHED
    assert fake_runpod.creates == 0
