"""guard's tools as LangChain tools: an agent built with LangChain calls them like any other,
and each call goes to guardd, which decides it, records it and runs it confined.

    pip install clients/python langchain-core
    GUARD_SOCKET=/run/guard/guard.sock python examples/langchain_tools.py

`schema()` and `call()` need only guard_client; `langchain_tools()` imports langchain-core.
"""

import json
import sys

import guard_client

_TYPES = {"string": "string", "path": "string", "url": "string", "enum": "string",
          "integer": "integer", "boolean": "boolean"}


def schema(spec):
    """The JSON Schema of a tool's arguments, from the specs guardd lists (`tools`)."""
    properties, required = {}, []
    for arg in spec["args"]:
        prop = {"type": _TYPES[arg["type"]]}
        if arg.get("values"):
            prop["enum"] = arg["values"]
        if arg.get("pattern"):
            prop["pattern"] = arg["pattern"]
        if arg.get("max_len") is not None:
            prop["maxLength"] = arg["max_len"]
        properties[arg["name"]] = prop
        if arg["required"]:
            required.append(arg["name"])
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def call(client, name, args):
    """Runs one call through guardd; what the model reads back (a refusal is text too)."""
    try:
        result = client.run(name, args)
    except guard_client.Blocked as e:
        return f"refused by guard: {e}"
    except guard_client.GuardError as e:
        return f"guard could not run the tool: {e}"
    text = result.stdout.decode(errors="replace")
    if result.stopped:
        text += "\n[guard stopped the call: it did something it was not approved to do]"
    elif result.diverged:
        # Under on_divergence = "deny" the refused effect did not happen but the call went on,
        # whatever its exit code: the model must not read the output as a clean success.
        text += (f"\n[exit {result.exit_code}; guard refused something the call was not approved "
                 "to do] " + result.stderr.decode(errors="replace"))
    elif result.exit_code != 0:
        text += f"\n[exit {result.exit_code}] " + result.stderr.decode(errors="replace")
    return text


def langchain_tools(client=None):
    """One LangChain StructuredTool per tool guardd lets this caller run, less those that read
    their caller's stdin stream (`stdin = "caller"`): a model has none to give them, and guardd
    refuses such a call without `input` (a tool whose input is an argument is offered)."""
    from langchain_core.tools import StructuredTool

    client = client or guard_client.Client()
    tools = []
    for spec in client.tools():
        if spec.get("stdin") == "caller":
            continue
        name = spec["name"]
        tools.append(StructuredTool.from_function(
            func=lambda _name=name, **kwargs: call(client, _name, kwargs),
            name=name,
            description=spec.get("description") or name,
            args_schema=schema(spec),
        ))
    return tools


if __name__ == "__main__":
    client = guard_client.Client()
    for spec in client.tools():
        print(spec["name"], json.dumps(schema(spec)))
    if len(sys.argv) > 2:
        print(call(client, sys.argv[1], json.loads(sys.argv[2])))
