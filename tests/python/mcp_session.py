"""Drives guard-mcp with the official MCP Python SDK (`mcp` from PyPI), as an agent would.

Usage: mcp_session.py SERVER_JSON PLAN_JSON

SERVER_JSON is the server as an MCP client's configuration names it: {"command", "args", "env"}.

PLAN_JSON is a list of steps; each step's outcome is printed as one JSON line on stdout, for the
Rust test (tests/suite/mcp.rs) to assert on:
  {"list": true}                            -> {"tools": [{name, description, inputSchema, outputSchema, annotations}]}
  {"call": NAME, "arguments": {...}}        -> {"isError", "texts", "structured", "schema_errors"}
                                               (the structured content checked with jsonschema
                                               against the outputSchema listed last, error
                                               results too: the SDK checks only the others), or
                                               {"error": {"code", "message", "data"}} for a
                                               JSON-RPC error
  {"call": NAME, ..., "cancel_after_progress": true}
                                            -> {"progress": [...], "cancelled": true}
  {"call": NAME, ..., "cancel_after": SECONDS}
                                            -> {"cancelled": true}
  {"run": [argv...], "cwd"?, "env"?, "uid"?} -> {"code", "stdout", "stderr"}: a command the test needs run mid-session
                                               (as uid, its gid the same, when given)
  {"direct": [argv...], "cwd"?, "env"?, "uid"?}
                                         -> {"code", "ms"}: a command run as an agent running
                                               as uid runs it (tests/python/direct_runner.py,
                                               one per uid, started as it)
Calls and runs also say how long they took, in "ms" (the bench's agent session).
  {"await_list_changed": SECONDS}           -> {"list_changed": bool}
A step with "call_id_of": N takes the call_id of step N's structured content: a call's
arguments get it as "call_id", and "{call_id}" in a run's argv is replaced by it (a held call
released, approved or denied by the test mid-session).
  {"roots": [URI, ...]}                     -> {"roots_changed": true}: the client's roots now,
                                               and a roots/list_changed notification sent

SERVER_JSON may also hold "roots": [URI, ...]: the client then offers the roots capability and
answers roots/list with them (as an editor gives its open folders).
"""

import json
import pathlib
import subprocess
import sys
import time

import anyio
import jsonschema
import mcp.types as types
from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client


def out(obj):
    print(json.dumps(obj), flush=True)


RUNNER = pathlib.Path(__file__).with_name("direct_runner.py").read_text()
runners = {}


def direct(step):
    """A "direct" step, through the runner of its uid (started on first use)."""
    uid = step.get("uid")
    if uid not in runners:
        # The system's interpreter: the one running this may be in a home uid cannot read.
        runners[uid] = subprocess.Popen(
            ["/usr/bin/python3", "-c", RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, cwd="/", user=uid, group=uid, extra_groups=[] if uid is not None else None)
    runner = runners[uid]
    command = {"run": step["direct"], "cwd": step.get("cwd"), "env": step.get("env")}
    runner.stdin.write(json.dumps(command) + "\n")
    runner.stdin.flush()
    return json.loads(runner.stdout.readline())


async def main(server, plan):
    params = StdioServerParameters(
        command=server["command"], args=server.get("args", []), env=server.get("env"))
    list_changed = anyio.Event()
    changed = {"event": list_changed}
    output_schemas = {}

    async def on_message(message):
        if isinstance(message, types.ServerNotification):
            root = getattr(message, "root", message)
            if isinstance(root, types.ToolListChangedNotification):
                changed["event"].set()

    roots = {"uris": server.get("roots")}

    async def list_roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=u) for u in roots["uris"]])

    callback = list_roots if roots["uris"] is not None else None
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message,
                                 list_roots_callback=callback) as session:
            await session.initialize()
            results = []
            for step in plan:
                if "call_id_of" in step:
                    step = with_call_id(step, results[step["call_id_of"]])
                result = await run_step(session, step, output_schemas, changed, roots)
                out(result)
                results.append(result)


def with_call_id(step, earlier):
    """`step` with the call_id of the `earlier` step's result in its arguments or argv."""
    call_id = earlier["structured"]["call_id"]
    step = dict(step)
    if "call" in step:
        step["arguments"] = {**step.get("arguments", {}), "call_id": call_id}
    if "run" in step:
        step["run"] = [a.replace("{call_id}", call_id) for a in step["run"]]
    return step


async def run_step(session, step, output_schemas, changed, roots):
    """Runs one step; returns its outcome."""
    if "list" in step:
        result = await session.list_tools()
        output_schemas.update({t.name: t.output_schema for t in result.tools})
        return {"tools": [
            {
                "name": t.name,
                "description": t.description,
                "inputSchema": t.input_schema,
                "outputSchema": t.output_schema,
                "annotations": t.annotations.model_dump(by_alias=True, exclude_none=True)
                if t.annotations else None,
            }
            for t in result.tools
        ]}
    elif "call" in step and step.get("cancel_after_progress"):
        progress = []
        got = anyio.Event()

        async def on_progress(value, total, message):
            progress.append({"progress": value, "total": total, "message": message})
            got.set()

        async with anyio.create_task_group() as tg:
            async def call():
                await session.call_tool(step["call"], step.get("arguments", {}),
                                        progress_callback=on_progress)
            tg.start_soon(call)
            with anyio.fail_after(30):
                await got.wait()
            tg.cancel_scope.cancel()
        return {"progress": progress, "cancelled": True}
    elif "call" in step and "cancel_after" in step:
        async with anyio.create_task_group() as tg:
            async def call():
                await session.call_tool(step["call"], step.get("arguments", {}))
            tg.start_soon(call)
            await anyio.sleep(step["cancel_after"])
            tg.cancel_scope.cancel()
        return {"cancelled": True}
    elif "call" in step:
        started = time.perf_counter()
        try:
            r = await session.call_tool(step["call"], step.get("arguments", {}))
        except MCPError as e:
            return {"error": {"code": e.code, "message": e.message, "data": e.data}}
        # What the agent waited for: the test's own schema check below is not.
        ms = (time.perf_counter() - started) * 1e3
        schema = output_schemas.get(step["call"])
        errors = None if schema is None else [
            e.message for e in
            jsonschema.validators.validator_for(schema)(schema).iter_errors(
                r.structured_content)
        ]
        return {
            "ms": ms,
            "isError": bool(r.is_error),
            "texts": [c.text for c in r.content if getattr(c, "type", "") == "text"],
            "structured": r.structured_content,
            "schema_errors": errors,
        }
    elif "run" in step:
        started = time.perf_counter()
        done = subprocess.run(step["run"], capture_output=True, text=True,
                              cwd=step.get("cwd"), env=step.get("env"),
                              user=step.get("uid"), group=step.get("uid"),
                              extra_groups=[] if "uid" in step else None)
        ms = (time.perf_counter() - started) * 1e3
        return {"ms": ms, "code": done.returncode, "stdout": done.stdout,
                "stderr": done.stderr}
    elif "direct" in step:
        return direct(step)
    elif "roots" in step:
        roots["uris"] = step["roots"]
        await session.send_roots_list_changed()
        return {"roots_changed": True}
    elif "await_list_changed" in step:
        with anyio.move_on_after(step["await_list_changed"]):
            await changed["event"].wait()
        seen = changed["event"].is_set()
        changed["event"] = anyio.Event()
        return {"list_changed": seen}
    else:
        raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]), json.loads(sys.argv[2]))
