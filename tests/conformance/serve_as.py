"""`python serve_as.py [--old-revision] [--plugins MODULE] KIND:NAME`: the kernel's plugin server, as the subprocess
runtime starts it, with a twist for the tests of the conformance suite.

--old-revision   serve as a kernel of the previous contract revision did: contract version 1, and none of the
                 optional features added since (Metadata.features is empty), so the client must not use them.
--plugins M      also load plugin module M (this directory is on sys.path), e.g. broken_plugins.
"""
from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if "--plugins" in argv:
        at = argv.index("--plugins")
        module = argv[at + 1]
        del argv[at:at + 2]
        extra = os.environ.get("STATESET_AGENTS_PLUGIN_MODULES")
        os.environ["STATESET_AGENTS_PLUGIN_MODULES"] = ",".join(filter(None, [extra, module]))
    if "--old-revision" in argv:
        argv.remove("--old-revision")
        from stateset_agents.core.runtimes import wire

        wire.FEATURES = {}
    from stateset_agents.core.runtimes.serve import main as serve

    return serve(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
