"""`python -m stateset_provider_localcmd.supervise JOB_DIR`: runs the job's command and holds it to its deadline.

The provider starts this detached, as the leader of a new process group that the command joins, so terminating
the group stops both. At the deadline (`job.json`'s `deadline_at`: where the spend reaches the cap, or --max-hours)
it asks the command to stop (the worker's stop file, then SIGTERM) and kills it after a grace period, whoever is
watching. It records how the command ended in exit.json.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from stateset_agents.core.jsonio import load_json, write_json
from stateset_agents.plugin_api import jobs

from .provider import GRACE_S


def supervise(job: Path) -> int:
    meta = load_json(job / "job.json")
    child = subprocess.Popen(meta["command"], cwd=job, stdin=subprocess.DEVNULL)
    reason = "exited"
    try:
        returncode = child.wait(timeout=max(0.0, float(meta["deadline_at"]) - time.time()))
    except subprocess.TimeoutExpired:
        reason = "deadline"
        (job / jobs.STOP_FILE).touch()  # the kernel's worker saves and stops at its next safe boundary
        child.terminate()
        try:
            returncode = child.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            returncode = child.wait()
    write_json(job / "exit.json", {"reason": reason, "returncode": returncode, "finished_at": time.time()})
    return 0 if reason == "exited" and returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
