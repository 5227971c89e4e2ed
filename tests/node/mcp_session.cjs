// Drives guard-mcp with the official MCP TypeScript SDK (`@modelcontextprotocol/sdk` from npm),
// as Claude Code, Claude Desktop and the editors built on Node start and call an MCP server:
// through `StdioClientTransport`, whose `child_process` gives the server Unix socket pairs as
// its stdin and stdout.
//
// Usage: node mcp_session.cjs NODE_MODULES_DIR SERVER_JSON PLAN_JSON
//
// SERVER_JSON is the server as a client's configuration names it: {"command", "args", "env",
// "cwd"}. PLAN_JSON is a list of steps; each step's outcome is printed as one JSON line, for
// the Rust test (tests/suite/mcp_node.rs) to assert on:
//   {"list": true}                     -> {"tools": [{name, inputSchema, outputSchema, ...}]}
//   {"call": NAME, "arguments": {...}} -> {"isError", "texts", "structured"}, or {"error":
//                                         {"code", "message"}} when the SDK refused the result
//                                         (a structuredContent its outputSchema does not fit)
//                                         or the server answered with a JSON-RPC error
//   {"ping": true}                     -> {"pong": true}
//   {"run": [argv...]}                 -> {"code", "stdout", "stderr"}: a command the test
//                                         needs run mid-session (guardctl approve)
//   {"await_list_changed": SECONDS}    -> {"list_changed": bool}
// A step with "call_id_of": N takes the call_id of step N's structured content: a call's
// arguments get it as "call_id", and "{call_id}" in a run's argv is replaced by it.
"use strict";

const { createRequire } = require("node:module");

const [modules, serverJson, planJson] = process.argv.slice(2);
const sdk = createRequire(`${modules}/`);
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");
const { ToolListChangedNotificationSchema } = sdk("@modelcontextprotocol/sdk/types.js");
const { spawnSync } = require("node:child_process");

// Set when the server said its tool list changed; awaited and reset by a step.
const changed = { seen: false, wake: null };

function out(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

function withCallId(s, earlier) {
  const callId = earlier.structured.call_id;
  const out = { ...s };
  if (s.call) out.arguments = { ...(s.arguments ?? {}), call_id: callId };
  if (s.run) out.run = s.run.map((a) => a.replace("{call_id}", callId));
  return out;
}

async function listChanged(seconds) {
  if (!changed.seen) {
    await new Promise((resolve) => {
      changed.wake = resolve;
      setTimeout(resolve, seconds * 1000);
    });
  }
  const seen = changed.seen;
  changed.seen = false;
  changed.wake = null;
  return { list_changed: seen };
}

async function step(client, s) {
  if (s.run) {
    const done = spawnSync(s.run[0], s.run.slice(1), { encoding: "utf8" });
    return { code: done.status, stdout: done.stdout, stderr: done.stderr };
  }
  if (s.await_list_changed !== undefined) {
    return listChanged(s.await_list_changed);
  }
  if (s.list) {
    const listed = await client.listTools();
    return { tools: listed.tools };
  }
  if (s.ping) {
    await client.ping();
    return { pong: true };
  }
  if (s.call) {
    try {
      const r = await client.callTool({ name: s.call, arguments: s.arguments ?? {} });
      return {
        isError: Boolean(r.isError),
        texts: r.content.filter((c) => c.type === "text").map((c) => c.text),
        structured: r.structuredContent ?? null,
      };
    } catch (e) {
      return { error: { code: e.code ?? null, message: String(e.message) } };
    }
  }
  throw new Error(`unknown step ${JSON.stringify(s)}`);
}

async function main() {
  const server = JSON.parse(serverJson);
  const transport = new StdioClientTransport({
    command: server.command,
    args: server.args ?? [],
    env: { ...process.env, ...(server.env ?? {}) },
    cwd: server.cwd,
    stderr: "inherit",
  });
  const client = new Client({ name: "guard-tests", version: "0" });
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    changed.seen = true;
    if (changed.wake) changed.wake();
  });
  await client.connect(transport);
  const results = [];
  for (let s of JSON.parse(planJson)) {
    if (s.call_id_of !== undefined) s = withCallId(s, results[s.call_id_of]);
    const result = await step(client, s);
    out(result);
    results.push(result);
  }
  await client.close();
}

main().catch((e) => {
  process.stderr.write(`${e.stack ?? e}\n`);
  process.exit(1);
});
