"""Where the container tests find the images they need, shared by tests/containers and tests/examples."""
from __future__ import annotations

import os
from pathlib import Path

#: Where images/ci/prepare records the trainer image's CPU build (`$STATESET_TRAINER_IMAGES` moves it): a file of
#: its own, so that the conformance suite, which serves every component from every recorded image, stays fast.
TRAINER_RECORDS = Path(os.environ.get("STATESET_TRAINER_IMAGES") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stateset-agents" / "images-trainer-cpu.json")
