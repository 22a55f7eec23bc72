"""Generated gRPC contracts (package `stateset.agents.v1`). Do not edit: run `scripts/gen-protos`.

A test regenerates them from `protos/` and fails when these files are stale.
"""
CONTRACT_VERSIONS = (1,)
PROTO_PACKAGE = "stateset.agents.v1"
