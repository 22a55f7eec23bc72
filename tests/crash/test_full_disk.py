"""A full disk under ingest, improve run, train and deploy: a small tmpfs filled to a few KiB where this machine
lets the test mount one (as root), else RLIMIT_FSIZE in the child with SIGXFSZ ignored (the write fails with
EFBIG); ingest runs under both. Each command fails with one clear line naming the file it could not write, exit
non-zero, no traceback, and everything already on the disk is intact byte-for-byte, with no temp file left."""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import orjson
import pytest

from .crashkit import run, snapshot, temps
from .training_runs import train_args


def _mount(point: Path, size: int) -> bool:
    point.mkdir(parents=True)
    if os.geteuid() != 0 or os.environ.get("STATESET_CRASH_NO_TMPFS"):  # the latter: to run the fsize variants
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], capture_output=True)
    return done.returncode == 0


class Disk:
    """A folder whose writes run out: `fill(leave)` once the earlier outputs are in place; `preexec` for the
    command's process (the file-size limit, when no tmpfs could be mounted)."""

    def __init__(self, root: Path, mounted: bool):
        self.root, self.mounted, self.limit = root, mounted, None

    def fill(self, leave: int) -> None:
        if self.mounted:
            stat = os.statvfs(self.root)
            free = stat.f_bavail * stat.f_frsize
            with open(self.root / "ballast", "wb") as f:
                f.write(b"\0" * max(free - leave, 0))
        else:
            self.limit = leave

    def free(self) -> None:
        (self.root / "ballast").unlink(missing_ok=True)
        self.limit = None

    def preexec(self):
        if self.limit is None:
            return None
        limit = self.limit

        def limit_file_size():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        return limit_file_size


@pytest.fixture(params=["tmpfs", "fsize"])
def disk(request, tmp_path):
    root = tmp_path / "disk"
    if request.param == "tmpfs":
        if not _mount(root, 4 << 20):
            pytest.skip("this machine refuses a tmpfs mount; the fsize variant covers it")
        yield Disk(root, True)
        subprocess.run(["umount", "-l", str(root)], check=False)
    else:
        root.mkdir()
        yield Disk(root, False)


def one_of(disk: Disk, fsize_too: bool):
    """tmpfs when mounted; the fsize variant runs for a command only when no tmpfs could be mounted (budget)."""
    if not disk.mounted and not fsize_too and _mount(disk.root.parent / "probe", 1 << 20):
        subprocess.run(["umount", "-l", str(disk.root.parent / "probe")], check=False)
        pytest.skip("covered by the tmpfs variant on this machine")


def fails_clearly(args: list, cwd: Path, state: Path, disk: Disk, names: tuple[str, ...]) -> str:
    done = run(args, cwd, state, ok=False, preexec=disk.preexec())
    err = done.stderr
    assert done.returncode != 0, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    reason = "No space left on device" if disk.mounted else "File too large"
    line = next((ln for ln in err.splitlines() if reason in ln), None)
    assert line is not None, err[-3000:]
    assert line.startswith("error:") and any(name in line for name in names), line
    return line


def intact(disk: Disk, before: dict[str, bytes]) -> None:
    after = {k: v for k, v in snapshot(disk.root).items() if k != "ballast"}
    assert after == before
    assert not temps(disk.root), temps(disk.root)


def test_ingest_on_a_full_disk(disk, tmp_path, state_dir):
    from stateset_agents.samples import LOGS

    out = disk.root / "ingested"
    small = tmp_path / "small.jsonl"  # an earlier run's outputs, each file unlike the new run's (its rejects too)
    small.write_bytes(b"{bad\n" + b"".join(LOGS.read_bytes().splitlines(keepends=True)[:10]))
    run(["ingest", "-f", "openai", "-i", small, "-o", out], tmp_path, state_dir)
    before = snapshot(disk.root)
    disk.fill(32 << 10)  # the full log's transcripts are 280 KB
    fails_clearly(["ingest", "-f", "openai", "-i", LOGS, "-o", out], tmp_path, state_dir, disk,
                  (str(out / "transcripts.jsonl"),))
    intact(disk, before)


def test_improve_run_on_a_full_disk(disk, tmp_path, state_dir):
    one_of(disk, fsize_too=False)
    from stateset_agents.samples import LOGS

    ingested = tmp_path / "ingested"
    run(["ingest", "-f", "openai", "-i", LOGS, "-o", ingested], tmp_path, state_dir)
    out = disk.root / "improved"
    few = tmp_path / "few"  # an earlier run's outputs (every file unlike the new run's) on the same disk
    few.mkdir()
    (few / "transcripts.jsonl").write_bytes(b"".join((ingested / "transcripts.jsonl").read_bytes()
                                                     .splitlines(keepends=True)[:30]))
    run(["improve", "run", "--transcripts", few, "--reward", "customer_support", "--output", out], tmp_path,
        state_dir)
    before = snapshot(disk.root)
    assert len(before) == 6
    disk.fill(200 << 10)  # room for graded.jsonl (120 KB) and the splits, not curated.jsonl (690 KB)
    outputs = ("curated.jsonl", "graded.jsonl", "validation.jsonl", "test.jsonl", "next_steps.md",
               "improve_summary.json")
    fails_clearly(["improve", "run", "--transcripts", ingested, "--reward", "customer_support", "--output", out],
                  tmp_path, state_dir, disk, tuple(str(out / n) for n in outputs))
    intact(disk, before)


def test_train_on_a_full_disk_then_reload_gives_the_uninterrupted_adapter(disk, trained, train_inputs, tmp_path,
                                                                          state_dir):
    """The disk fills during the second checkpoint: the run fails naming the file and is quarantined (a failed
    checkpoint write, docs/training.md), an earlier run on the disk is intact, and once there is room `--reload`
    continues from the verified first checkpoint to the uninterrupted run's adapter bytes."""
    one_of(disk, fsize_too=False)
    shutil.copytree(trained["run"], disk.root / "earlier-run")
    before = snapshot(disk.root)
    new = disk.root / "new-run"
    # A checkpoint is 160 KB, its training_state.pt 100 KB: on the tmpfs room for the first checkpoint only; under
    # a file-size limit the first checkpoint's training_state.pt fails.
    disk.fill(240 << 10 if disk.mounted else 60 << 10)
    line = fails_clearly(train_args(train_inputs, new), tmp_path, state_dir, disk, (str(new),))
    manifest = orjson.loads((new / "manifest.json").read_bytes())
    assert manifest["status"] != "completed", line
    assert {k: v for k, v in snapshot(disk.root).items() if k.startswith("earlier-run/")} == before
    disk.free()
    whole = list((new / "checkpoints").glob("step-*/state.json"))
    way = ("--reload" if manifest["status"] == "quarantined" else "--resume") if whole else "--overwrite"
    if disk.mounted:
        assert way == "--reload", line
    run(train_args(train_inputs, new, way), tmp_path, state_dir)
    adapter = "adapter/adapter_model.safetensors"
    assert (new / adapter).read_bytes() == (trained["run"] / adapter).read_bytes()
    assert not temps(new), temps(new)


def test_deploy_on_a_full_disk(disk, trained, tmp_path, state_dir):
    one_of(disk, fsize_too=False)
    registry = disk.root / "registry"
    run(["deploy", trained["run"], "--to", registry, "--name", "old", "--force"], tmp_path, state_dir)
    before = snapshot(disk.root)
    disk.fill(24 << 10)  # the adapter is 47 KB
    fails_clearly(["deploy", trained["run"], "--to", registry, "--name", "new", "--force"], tmp_path, state_dir,
                  disk, (str(registry / "new" / "adapter"),))
    intact(disk, before)
    assert run(["lineage", registry / "old"], tmp_path, state_dir).returncode == 0
