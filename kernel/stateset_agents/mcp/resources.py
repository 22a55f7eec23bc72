"""Resources: the files a run directory and an `improve run` folder hold, read-only, under the server's roots.

    stateset://runs/{run}/{manifest.json | eval_results.json | metrics.jsonl | next_steps.md}
    stateset://improve/{folder}/{improve_summary.json | next_steps.md}

`{run}` and `{folder}` are paths relative to a root (percent-encoded). Listing walks the roots a few levels deep
for folders holding a manifest.json or an improve_summary.json."""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote, unquote

import mcp_types as types

from ..core.errors import InputError
from .roots import Roots

SCHEME = "stateset://"
FILES = {"runs": ("manifest.json", "eval_results.json", "metrics.jsonl", "next_steps.md"),
         "improve": ("improve_summary.json", "next_steps.md")}
MARKER = {"runs": "manifest.json", "improve": "improve_summary.json"}
MIME = {".json": "application/json", ".jsonl": "application/jsonl", ".md": "text/markdown"}
DEPTH = 4  # how deep listing looks below each root
SKIP = {".git", ".venv", "node_modules", "__pycache__", "checkpoints", "adapter"}


def uri(kind: str, relative: str, name: str) -> str:
    return f"{SCHEME}{kind}/{quote(relative)}/{name}"


def _found(roots: Roots):
    for root in roots.folders:
        for here, dirs, names in os.walk(root):
            depth = len(Path(here).relative_to(root).parts)
            dirs[:] = [] if depth >= DEPTH else sorted(d for d in dirs if d not in SKIP and not d.startswith("."))
            for kind, marker in MARKER.items():
                if marker in names:
                    yield kind, Path(here), [n for n in FILES[kind] if n in names]


def lister(roots: Roots):
    async def list_resources(ctx, params) -> types.ListResourcesResult:
        listed, seen = [], set()
        for kind, folder, names in _found(roots):
            relative = roots.relative(folder)
            for name in names:
                address = uri(kind, relative, name)
                if address in seen:
                    continue
                seen.add(address)
                listed.append(types.Resource(uri=address, name=f"{relative}/{name}",
                                             mime_type=MIME[Path(name).suffix],
                                             description=f"{'run' if kind == 'runs' else 'improve'} {relative}: {name}"))
        return types.ListResourcesResult(resources=listed)

    return list_resources


async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=[
        types.ResourceTemplate(uri_template=SCHEME + "runs/{run}/{file}", name="run file",
                               description="A run directory's " + ", ".join(FILES["runs"]) + " ({run}: its path "
                                           "relative to a root)"),
        types.ResourceTemplate(uri_template=SCHEME + "improve/{folder}/{file}", name="improve file",
                               description="An `improve run` folder's " + ", ".join(FILES["improve"]))])


def resolve(roots: Roots, address: str) -> Path:
    """The file a stateset:// URI names, inside the roots; an InputError naming what is wrong."""
    if not address.startswith(SCHEME):
        raise InputError(f"not a {SCHEME} resource: {address}", field="uri")
    kind, _, rest = address[len(SCHEME):].partition("/")
    folder, _, name = rest.rpartition("/")
    if kind not in FILES or not folder:
        raise InputError(f"a resource is {SCHEME}runs/RUN/FILE or {SCHEME}improve/FOLDER/FILE, got {address}",
                         field="uri")
    if name not in FILES[kind]:
        raise InputError(f"{name!r} is not a {kind} resource (one of {', '.join(FILES[kind])})", field="uri")
    path = roots.path(unquote(folder), "uri") / name
    if not path.is_file():
        raise InputError("no such file", path=str(path), field="uri")
    return path


def reader(roots: Roots):
    async def read_resource(ctx, params) -> types.ReadResourceResult:
        from mcp.shared.exceptions import MCPError

        try:
            path = resolve(roots, str(params.uri))
            text = path.read_text(encoding="utf-8")
        except (InputError, OSError, UnicodeDecodeError) as exc:
            # a resource read has no isError result: a JSON-RPC error whose message is the CLI's
            raise MCPError(code=-32002, message=str(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=str(params.uri), mime_type=MIME[path.suffix], text=text)])

    return read_resource
