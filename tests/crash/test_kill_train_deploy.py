"""SIGKILL during `train` and `deploy`. train: only whole checkpoints survive a kill, and the documented recovery
(`--resume` from the latest checkpoint; with none, `--resume` is refused and `--overwrite` starts over) ends with
the adapter bytes, adapter sha256 and update digests of an uninterrupted run (docs/training.md promises exact
resume). deploy: the registry holds the whole entry or none, and the rerun deploys it, leaving no temp folder."""
from __future__ import annotations

import random
from pathlib import Path

import orjson

from stateset_agents.core.jsonio import sha256_file

from .crashkit import Kill, assert_whole, kill_at, run, snapshot, temp_appears, temps
from .training_runs import train_args

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
    if manifest.exists() and orjson.loads(manifest.read_bytes())["status"] == "completed":  # never a success
        record = orjson.loads(manifest.read_bytes())  # it did not get: completed means all of it, as recorded
        assert record["committed_updates"] == 4 and sha256_file(run_dir / ADAPTER) == record["adapter"]["sha256"]


def recover(inputs, run_dir: Path, cwd: Path, state: Path, point: Kill | None = None) -> str:
    """The documented recovery: --resume from the latest checkpoint, or, with none, --resume is refused (one
    clear line) and --overwrite starts over; killed again at `point` when given. Returns which it took."""
    def go(args) -> bool:  # False: a kill point the run did not reach
        return kill_at(args, cwd, state, point) if point else run(args, cwd, state).returncode == 0

    if checkpoints(run_dir):
        return "resume" if go(train_args(inputs, run_dir, "--resume")) else "done"
    if not run_dir.exists():
        return "fresh" if go(train_args(inputs, run_dir)) else "done"
    refused = run(train_args(inputs, run_dir, "--resume"), cwd, state, ok=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert "checkpoint" in refused.stderr, refused.stderr[-2000:]
    return "overwrite" if go(train_args(inputs, run_dir, "--overwrite")) else "done"


def test_sigkill_during_train_then_the_documented_recovery_gives_the_uninterrupted_adapter(trained, train_inputs,
                                                                                          tmp_path, state_dir):
    """One run killed three times: at a seeded delay across the reference's measured duration; its recovery
    with the second checkpoint written whole but not renamed; the next with the last checkpoint kept and the final
    adapter not renamed (each exact point fires when the recovery still has it to do). Recovered to the end."""
    seconds = random.Random(24).uniform(0.3, 0.9) * trained["seconds"]
    points = [Kill("second checkpoint written, not renamed", before_rename="step-000004"),
              Kill("final adapter not renamed", before_rename="adapter"), None]
    got = tmp_path / "run"
    fired = [kill_at(train_args(train_inputs, got), tmp_path, state_dir, Kill(f"after {seconds:.1f} s",
                                                                             after=seconds))]
    ways = []
    for point in points:
        if got.exists():
            after_kill(got)
        ways.append(recover(train_inputs, got, tmp_path, state_dir, point))
        if point is not None:
            fired.append(ways[-1] != "done")
    assert ways[-1] == "resume" and fired[-1], (ways, fired)  # the final adapter's rename is always still to do
    want = trained["run"]
    manifest = orjson.loads((got / "manifest.json").read_bytes())
    assert manifest["status"] == "completed"
    assert (got / ADAPTER).read_bytes() == (want / ADAPTER).read_bytes(), ways
    assert manifest["adapter"]["sha256"] == orjson.loads((want / "manifest.json").read_bytes())["adapter"][
        "sha256"] == sha256_file(got / ADAPTER)
    assert committed(got) == committed(want)
    assert not temps(got), temps(got)
    assert run(["lineage", got], tmp_path, state_dir).returncode == 0


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
