"""Runs commands as an agent running as this user runs them: spawned by the interpreter itself
(vfork and exec, no change of identity), their output read to the end.

Each line on stdin is a JSON step {"run": [argv...], "cwd"?, "env"?}; each answer is one JSON
line {"code", "ms"}, the time from the spawn to the exit with all output read. The bench's
agent session (tests/bench/session.rs, and tests/python/mcp_session.py's "direct" steps) starts
one as the workspace's owner and times each command's direct twin through it: run by a root
driver that changes identity per command, each spawn is a fork of the driver (its page tables
copied), which cost 1 to 4 ms more here than an agent's spawn, a baseline that flattered guard.
"""

import json
import subprocess
import sys
import time

for line in sys.stdin:
    step = json.loads(line)
    started = time.perf_counter()
    done = subprocess.run(step["run"], capture_output=True, cwd=step.get("cwd"),
                          env=step.get("env"))
    ms = (time.perf_counter() - started) * 1e3
    print(json.dumps({"code": done.returncode, "ms": ms}), flush=True)
