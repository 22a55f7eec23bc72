"""Real processes of the installed command, killed with SIGKILL at chosen points, and the checks of what they left:
every file whole (each JSON and JSONL parses), each output the old bytes or the new, no temp file under an
output's name, and none left once the command has run again."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import orjson

_INSTALLED = Path(sys.executable).with_name("stateset-agents")
COMMAND = [str(_INSTALLED)] if _INSTALLED.exists() else [sys.executable, "-m", "stateset_agents"]
# The temp names the writers use: jsonio.atomic_write's `.NAME.PID.XXXX.tmp`, a checkpoint's `.step-N.tmp`, the
# final adapter's `.adapter.tmp`, deploy's `.NAME.tmp-PID`.
TEMP = re.compile(r"^\..+(\.tmp|\.tmp-\d+)$")


def env(state: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "STATESET_AGENTS_STATE_DIR": str(state), "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false", "NO_COLOR": "1", "COLUMNS": "200", **extra}


# `python -m stateset_agents` with an audit hook that SIGKILLs the process just before it renames a file onto the
# name given: an exact kill point in the window between two renames, which polling from outside would race.
_KILL_BEFORE_RENAME = """
import os, runpy, signal, sys
name = os.environ.pop("CRASH_KILL_BEFORE_RENAME")
def hook(event, args):
    # os.rename covers os.replace; replace_directory's atomic swap (renameat2) raises an event of its own
    if event in ("os.rename", "stateset_agents.replace_directory") and os.path.basename(os.fspath(args[1])) == name:
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
sys.argv[0] = "stateset-agents"
runpy.run_module("stateset_agents", run_name="__main__", alter_sys=True)
"""


def start(args: list[str], cwd: Path, state: Path, preexec: Callable[[], None] | None = None,
          before_rename: str | None = None) -> subprocess.Popen:
    command = [sys.executable, "-c", _KILL_BEFORE_RENAME] if before_rename else COMMAND
    extra = {"CRASH_KILL_BEFORE_RENAME": before_rename} if before_rename else {}
    return subprocess.Popen(command + [str(a) for a in args], cwd=cwd, env=env(state, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)


def run(args: list[str], cwd: Path, state: Path, *, ok: bool = True, timeout: float = 180,
        preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    proc = start(args, cwd, state, preexec)
    out, err = proc.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if ok:
        assert done.returncode == 0, f"{args[0]} failed ({done.returncode}): {err[-3000:]}"
    return done


def timed(args: list[str], cwd: Path, state: Path) -> float:
    began = time.monotonic()
    run(args, cwd, state)
    return time.monotonic() - began


@dataclass
class Kill:
    """Where to kill: `after` seconds from the start, or as soon as `when()` is true (polled every millisecond),
    whichever comes first; or, exactly, just before the process renames a file onto the name `before_rename`."""

    name: str
    after: float | None = None
    when: Callable[[], bool] | None = None
    before_rename: str | None = None


def kill_at(args: list[str], cwd: Path, state: Path, point: Kill, timeout: float = 180) -> bool:
    """Run the command and SIGKILL it at `point`. True when it was killed, False when it finished first."""
    proc = start(args, cwd, state, before_rename=point.before_rename)
    began = time.monotonic()
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - began
            if (point.after is not None and elapsed >= point.after) or (point.when is not None and point.when()):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
            assert elapsed < timeout, f"{point.name}: the command ran past {timeout} s"
            time.sleep(0.001)
        if point.before_rename:  # killed by the hook, or ended without that rename (then it must have succeeded)
            assert proc.returncode in (0, -signal.SIGKILL), f"{point.name}: exit {proc.returncode}"
            return proc.returncode == -signal.SIGKILL
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def appears(path: Path) -> Callable[[], bool]:
    return path.exists


def temp_appears(directory: Path, name: str) -> Callable[[], bool]:
    """A temp file (or folder) for `name` appeared in `directory`."""
    prefix = f".{name}."

    def check() -> bool:
        try:
            return any(e.startswith(prefix) for e in os.listdir(directory))
        except FileNotFoundError:
            return False
    return check


def replaced(path: Path) -> Callable[[], bool]:
    """`path` was renamed over (a new inode), or created."""
    before = path.stat().st_ino if path.exists() else None

    def check() -> bool:
        try:
            return path.stat().st_ino != before
        except FileNotFoundError:
            return False
    return check


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` but temp files, by relative path."""
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and not any(TEMP.match(part) for part in p.relative_to(directory).parts)}


def temps(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if TEMP.match(p.name))


def assert_whole(directory: Path) -> None:
    """Every JSON file parses, and every line of every JSONL file."""
    for path, data in snapshot(directory).items():
        if path.endswith(".json"):
            orjson.loads(data)
        elif path.endswith(".jsonl"):
            for number, line in enumerate(data.splitlines(), start=1):
                try:
                    orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise AssertionError(f"{path}:{number}: a partial line: {exc}") from None


def assert_old_or_new(directory: Path, old: dict[str, bytes], new: dict[str, bytes], what: str) -> dict[str, bytes]:
    """Each output is absent (when there was none), the old bytes or the new bytes; no other file appeared."""
    assert_whole(directory)
    now = snapshot(directory)
    assert set(now) <= set(old) | set(new), f"{what}: unexpected files {sorted(set(now) - set(old) - set(new))}"
    for name in set(old) | set(new):
        if name not in now:
            assert name not in old, f"{what}: {name} was lost"
            continue
        assert now[name] in (old.get(name), new.get(name)), f"{what}: {name} is neither the old nor the new file"
    return now
