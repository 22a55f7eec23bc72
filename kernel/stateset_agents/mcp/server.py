"""The MCP server: the official `mcp` SDK's low-level `Server` over the tools, resources and prompt of this package.

A tool call: arguments checked against the tool's input schema (a failure names the field), the tool's availability
asked of the registry, its function run in a worker thread (progress notifications go out from there), its result
checked against its output schema and sent as `structuredContent` plus a short text. Every failure is a tool error
(`isError: true`) carrying the message the CLI prints, never a protocol error. A cancelled call asks its function to
stop cooperatively and waits for it (so a cancelled `train` saves its checkpoint before anything else happens)."""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

from ..core._version import __version__
from . import prompts, resources
from .roots import Roots
from .tools import Call, Tool

log = logging.getLogger("stateset_agents.mcp")
SPEND_TOOLS = ("train_remote_launch",)
MAX_ARGUMENT_BYTES = 1 << 20  # one call's arguments as JSON; the HTTP transport refuses larger bodies before this
MAX_SHOWN = 80  # characters of a refused value an error message repeats


@dataclass
class Options:
    roots: Roots = field(default_factory=Roots)
    allow_spend: bool = False


def catalogue(allow_spend: bool) -> dict[str, Tool]:
    """Every tool this server offers, by name; a tool that spends money only with --allow-spend."""
    from . import tools_improve, tools_remote, tools_train

    tools = [*tools_improve.TOOLS, *tools_train.TOOLS, *tools_remote.TOOLS]
    return {t.name: t for t in tools if allow_spend or not t.spends}


def schema_problem(args: Any, schema: dict[str, Any]) -> str | None:
    """What is wrong with `args` against `schema`, each problem naming its field; None when nothing is."""
    from jsonschema import Draft202012Validator

    problems = []
    for error in sorted(Draft202012Validator(schema).iter_errors(args), key=lambda e: [str(p) for p in e.path]):
        where = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required":
            for name in (r for r in error.validator_value if r not in error.instance):
                problems.append((".".join(filter(None, [where, name])), "is required"))
        elif error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            for name in extra:
                problems.append((".".join(filter(None, [where, name])), "is not an argument of this tool"))
        elif error.validator in ("maxLength", "maxItems"):  # say how big, never echo the value
            unit = "characters" if error.validator == "maxLength" else "items"
            problems.append((where or "(arguments)",
                             f"is {len(error.instance)} {unit} long, above the limit of {error.validator_value}"))
        else:
            problems.append((where or "(arguments)", _shorten(error.message)))
    problems = list(dict.fromkeys(problems))  # one error per missing property, or one for all: said once
    if not problems:
        return None
    listed = "; ".join(f"{name}: {message}" for name, message in problems)
    return f"invalid arguments: {listed} (field '{problems[0][0]}')"


def _shorten(message: str) -> str:
    """A jsonschema message repeats the refused value: a huge one is cut, so the error stays readable."""
    return message if len(message) <= 4 * MAX_SHOWN else f"{message[:MAX_SHOWN]}... ({len(message)} characters)"


def size_problem(args: Any) -> str | None:
    """Arguments above MAX_ARGUMENT_BYTES as JSON: refused before validation, naming the largest field."""
    size = len(json.dumps(args, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size <= MAX_ARGUMENT_BYTES:
        return None
    sizes = {k: len(json.dumps(v, ensure_ascii=False)) for k, v in args.items()} if isinstance(args, dict) else {}
    largest = max(sizes, key=sizes.get) if sizes else "(arguments)"
    return (f"invalid arguments: {size} bytes, above the limit of {MAX_ARGUMENT_BYTES} for one call (field "
            f"'{largest}')")


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def _jsonable(value: Any) -> Any:
    import orjson

    return json.loads(orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS))


def build(options: Options) -> Server:
    tools = catalogue(options.allow_spend)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        from ..core.registry import get_registry

        registry = get_registry()
        listed = []
        for tool in tools.values():
            why = tool.unavailable(registry)
            description = tool.description if why is None else f"UNAVAILABLE here: {why}. {tool.description}"
            listed.append(types.Tool(name=tool.name, description=description, input_schema=tool.input_schema,
                                     output_schema=tool.output_schema,
                                     annotations=types.ToolAnnotations(read_only_hint=tool.name in READ_ONLY,
                                                                       destructive_hint=False,
                                                                       open_world_hint=tool.spends)))
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx, params) -> types.CallToolResult:
        tool = tools.get(params.name)
        if tool is None:
            if params.name in SPEND_TOOLS:
                return _error(f"{params.name} spends money: it exists only when the server was started with "
                              "--allow-spend (`stateset-agents mcp --allow-spend`); train_remote_plan quotes and "
                              "plans without renting anything")
            return _error(f"no tool {params.name!r}; the tools are: {', '.join(tools)}")
        args = params.arguments or {}
        problem = size_problem(args) or schema_problem(args, tool.input_schema)
        if problem:
            return _error(f"{tool.name}: {problem}")
        return await _run(tool, Call(args=dict(args), roots=options.roots, allow_spend=options.allow_spend), ctx)

    server = Server("stateset-agents", version=__version__, title="StateSet Agents",
                    instructions=prompts.INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=resources.lister(options.roots),
                    on_list_resource_templates=resources.list_templates,
                    on_read_resource=resources.reader(options.roots), on_list_prompts=prompts.list_prompts,
                    on_get_prompt=prompts.get_prompt)
    return server


READ_ONLY = {"improve_status", "lineage", "plugins_list", "runs_list", "run_status", "run_logs", "run_checkpoints",
             "costs"}


async def _run(tool: Tool, call: Call, ctx) -> types.CallToolResult:
    from ..core.errors import InputError, StatesetError, UnknownComponent
    from ..core.registry import get_registry

    why = tool.unavailable(get_registry())
    if why is not None:
        return _error(f"{tool.name} is unavailable here: {why}")
    portal_ok = threading.Event()
    portal_ok.set()

    def progress(done: float, total: float | None, message: str | None) -> None:
        if call.cancelled.is_set() or not portal_ok.is_set():
            return
        try:
            anyio.from_thread.run(ctx.session.report_progress, float(done),
                                  None if total is None else float(total), message)
        except Exception:  # a client that went away must not fail the work
            portal_ok.clear()

    call.progress = progress
    finished = threading.Event()

    def work() -> tuple[str, Any]:
        try:
            return "ok", tool.run(call)
        except InputError as exc:
            name = None if exc.field else call.field_of(exc.path)  # the argument the bad file came from
            return "error", str(exc) + (f" (field '{name}')" if name else "")
        except UnknownComponent as exc:  # "unknown reward 'x'": the argument that named it
            named = [k for k, v in call.args.items() if isinstance(v, str) and repr(v.rpartition(":")[2]) in str(exc)]
            return "error", str(exc) + (f" (field '{named[0]}')" if named else "")
        except StatesetError as exc:
            return "error", str(exc)
        except OSError as exc:  # a file the arguments named that cannot be used so (a folder, no permission)
            if exc.filename is None:
                log.exception("tool %s failed", tool.name)
                return "error", f"{tool.name} failed: {type(exc).__name__}: {exc}"
            name = call.field_of(str(exc.filename))
            return "error", f"{exc.filename}: {exc.strerror or exc}" + (f" (field '{name}')" if name else "")
        except Exception as exc:  # a bug is still a tool error, never a protocol crash
            log.exception("tool %s failed", tool.name)
            return "error", f"{tool.name} failed: {type(exc).__name__}: {exc}"
        finally:
            finished.set()

    try:
        outcome, value = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        call.cancelled.set()  # the tool's cooperative stop (train: the trainer's cancel)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(finished.wait)
        raise
    if outcome == "error":
        return _error(value)
    result = _jsonable(value)
    problem = schema_problem(result, tool.output_schema)
    if problem:  # fail closed: a result that breaks its own schema is not sent as a success
        return _error(f"{tool.name} produced a result that breaks its output schema: {problem}")
    try:
        text = tool.summary(result)
    except Exception:
        text = "done"
    return types.CallToolResult(content=[types.TextContent(text=text),
                                         types.TextContent(text=json.dumps(result, separators=(",", ":")))],
                                structured_content=result)


async def serve_stdio(options: Options) -> None:
    from mcp.server.stdio import stdio_server

    server = build(options)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
