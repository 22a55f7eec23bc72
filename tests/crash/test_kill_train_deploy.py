"""SIGKILL during `train` and `deploy`. train: only whole checkpoints survive a kill, and the documented recovery
(`--resume` from the latest checkpoint; with none, `--resume` is refused and `--overwrite` starts over) ends with
the adapter bytes, adapter sha256 and update digests of an uninterrupted run (docs/training.md promises exact
resume). deploy: the registry holds the whole entry or none, and the rerun deploys it, leaving no temp folder."""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from stateset_agents.core.jsonio import sha256_file

from .crashkit import Kill, assert_whole, kill_at, run, snapshot, temp_appears, temps
from .training_runs import reference_run, train_args

ADAPTER = Path("adapter") / "adapter_model.safetensors"


def committed(run_dir: Path) -> list[str]:
    lines = (run_dir / "receipts.jsonl").read_bytes().splitlines()
    return [r["update_sha256"] for r in map(orjson.loads, lines) if r.get("committed")]


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.parent.name for p in (run_dir / "checkpoints").glob("step-*/state.json"))


def after_kill(run_dir: Path) -> None:
    """What a kill may leave: whole files only, every checkpoint whole (state.json last, its files' sha256 right)."""
    assert_whole(run_dir)
    for name in checkpoints(run_dir):
        state = orjson.loads((run_dir / "checkpoints" / name / "state.json").read_bytes())
        for rel, digest in state["files"].items():
            assert sha256_file(run_dir / "checkpoints" / name / rel) == digest, f"{name}/{rel}"
    manifest = run_dir / "manifest.json"
    if manifest.exists():  # never a success it did not get
        assert orjson.loads(manifest.read_bytes())["status"] != "completed"


def recover(inputs, run_dir: Path, cwd: Path, state: Path) -> str:
    """The documented recovery: --resume from the latest checkpoint, or, with none, --resume is refused (one
    clear line) and --overwrite starts over. Returns which it took."""
    if checkpoints(run_dir):
        run(train_args(inputs, run_dir, "--resume"), cwd, state)
        return "resume"
    if not run_dir.exists():
        run(train_args(inputs, run_dir), cwd, state)
        return "fresh"
    refused = run(train_args(inputs, run_dir, "--resume"), cwd, state, ok=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert "checkpoint" in refused.stderr, refused.stderr[-2000:]
    run(train_args(inputs, run_dir, "--overwrite"), cwd, state)
    return "overwrite"


def test_sigkill_during_train_then_the_documented_recovery_gives_the_uninterrupted_adapter(train_inputs, tmp_path,
                                                                                          state_dir):
    reference_root = tmp_path / "reference"
    reference_root.mkdir()
    # Exact points first, beside the reference run (2 cores); then a seeded delay across its measured duration.
    exact = {
        "first checkpoint written, not renamed": Kill("checkpoint", before_rename="step-000002"),
        "last checkpoint kept, final adapter not renamed": Kill("adapter", before_rename="adapter"),
    }
    with ThreadPoolExecutor(3) as pool:
        ref = pool.submit(reference_run, train_inputs, reference_root)
        kills = {name: pool.submit(kill_at, train_args(train_inputs, tmp_path / name.replace(" ", "-")), tmp_path,
                                   state_dir, point) for name, point in exact.items()}
        reference = ref.result()
        assert all(k.result() for k in kills.values())
        rng = random.Random(24)
        seconds = rng.uniform(0.45, 0.9) * reference["seconds"]
        delayed = tmp_path / "delayed"
        kills["delay"] = pool.submit(kill_at, train_args(train_inputs, delayed), tmp_path, state_dir,
                                     Kill(f"after {seconds:.1f} s", after=seconds))
        for name in exact:
            after_kill(tmp_path / name.replace(" ", "-"))
        taken = {name: pool.submit(recover, train_inputs, tmp_path / name.replace(" ", "-"), tmp_path, state_dir)
                 for name in exact}
        kills["delay"].result()
        if delayed.exists():
            after_kill(delayed)
        taken["delay"] = pool.submit(recover, train_inputs, delayed, tmp_path, state_dir)
        ways = {name: t.result() for name, t in taken.items()}
    assert ways["first checkpoint written, not renamed"] == "overwrite"
    assert ways["last checkpoint kept, final adapter not renamed"] == "resume"
    want = reference["run"]
    for name in ways:
        got = tmp_path / name.replace(" ", "-") if name != "delay" else delayed
        manifest = orjson.loads((got / "manifest.json").read_bytes())
        assert manifest["status"] == "completed", name
        assert (got / ADAPTER).read_bytes() == (want / ADAPTER).read_bytes(), f"{name} ({ways[name]})"
        assert manifest["adapter"]["sha256"] == orjson.loads((want / "manifest.json").read_bytes())["adapter"][
            "sha256"] == sha256_file(got / ADAPTER)
        assert committed(got) == committed(want), name
        assert not temps(got), f"{name}: {temps(got)}"
    lineage = run(["lineage", tmp_path / "last-checkpoint-kept,-final-adapter-not-renamed"], tmp_path, state_dir)
    assert lineage.returncode == 0


def test_sigkill_during_deploy_leaves_the_whole_entry_or_none_and_the_rerun_deploys(trained, tmp_path, state_dir):
    registry = tmp_path / "registry"
    args = ["deploy", trained["run"], "--to", registry, "--name", "m", "--force"]
    points = [Kill("entry sealed, not renamed", before_rename="m"),
              Kill("as the copy starts", when=temp_appears(registry, "m"))]
    fired = []
    for point in points:
        if kill_at(args, tmp_path, state_dir, point):
            fired.append(point.name)
        assert not (registry / "m").exists(), f"{point.name}: an entry without its rename"
        left = sorted(p.name for p in registry.iterdir()) if registry.exists() else []
        assert all(name.startswith(".m.tmp-") for name in left), f"{point.name}: {left}"
        run(args, tmp_path, state_dir)
        entry = orjson.loads((registry / "m" / "entry.json").read_bytes())
        files = snapshot(registry / "m")
        assert set(files) == set(entry["files"]) | {"entry.json"}
        for rel, digest in entry["files"].items():
            assert sha256_file(registry / "m" / rel) == digest, rel
        assert files[str(ADAPTER)] == (trained["run"] / ADAPTER).read_bytes()
        assert not temps(registry), f"{point.name}: temp folders left after the rerun: {temps(registry)}"
        assert run(["lineage", registry / "m"], tmp_path, state_dir).returncode == 0
        (registry / "m").rename(tmp_path / f"deployed-{len(fired)}")  # the next point deploys again
    assert fired[0] == "entry sealed, not renamed"
