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
"use strict";

const { createRequire } = require("node:module");

const [modules, serverJson, planJson] = process.argv.slice(2);
const sdk = createRequire(`${modules}/`);
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");

function out(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

async function step(client, s) {
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
  await client.connect(transport);
  for (const s of JSON.parse(planJson)) {
    out(await step(client, s));
  }
  await client.close();
}

main().catch((e) => {
  process.stderr.write(`${e.stack ?? e}\n`);
  process.exit(1);
});
