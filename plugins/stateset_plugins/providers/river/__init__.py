"""River, in one package: `provider` (`provider:river`: jobs and chat sessions on River, priced from its token
usage), `backend` (the engine's hosted backend on River, offered under the `stateset_plugins.backends` entry-point
group as kind ``river``), `sdk` (the one module that touches River's client). The names both sides use are here,
once. Importing this package imports none of its modules (River's client needs Python 3.12+)."""
from __future__ import annotations

KEY_ENV = "RIVER_API_KEY"
DEFAULT_ENDPOINT = "api.river.ai"
#: In a River-trained run's adapter/: {"path", "base_model", "run_id"}, where River holds the weights (chat samples
#: them there).
CHECKPOINT_FILE = "river_checkpoint.json"
