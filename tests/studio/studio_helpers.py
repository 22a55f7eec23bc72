"""Helpers the studio tests share: waiting on the pilot, reading a widget's text, writing the studio's config."""
from __future__ import annotations

import json
import time
from pathlib import Path


async def until(pilot, condition, timeout=240.0, what="condition"):
    """Let the app run until `condition()` holds (workers and timers run meanwhile)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def text(app, selector) -> str:
    return str(app.query_one(selector).render())


def write_config(ws: Path, **config) -> Path:
    """WORKSPACE/studio/config.json, as the studio keeps it (a `finetune` config)."""
    path = ws / "studio" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return path
