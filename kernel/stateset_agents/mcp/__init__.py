"""`stateset-agents mcp`: the MCP server, a face of the kernel on the official `mcp` SDK (docs/mcp.md).

Thin like the CLI: each tool parses its arguments, calls the pipeline function the CLI command calls, and renders a
structured result. `server` builds the SDK server, `tools*` declare the tools, `resources` and `prompts` the rest,
`roots` keeps every path inside the folders the server was given, `http` adds the bearer key and Origin checks of
the streamable HTTP transport. Nothing here is imported until the command runs (the SDK is the `mcp` extra)."""
