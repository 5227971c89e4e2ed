"""guard_client against a real guardd (started by tests/suite/python.rs, which sets the
environment: GUARD_SOCKET, GUARD_CTL for guardctl). The policy it runs:

  echo  /bin/echo {words}, words a lowercase string
  cat   /bin/cat, copies its stdin (stdin = "caller")
  say   /bin/cat, copies its input argument `text` (stdin = { arg = "text" })
  net   guard-testtool sendto {addr}, may send to 127.0.0.1:9 only (anything else: killed)
  netdeny  sh: guard-testtool sendto 127.0.0.1:10 (refused, a divergence, not killed), then
        echo done: exits 0
  mail  high and irreversible: held for an admin ([approvals] allow_self, so root may approve)
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import unittest

import guard_client
from guard_client import Blocked, Client, Held, RequestError, Unreachable


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.guard = Client()  # GUARD_SOCKET

    def test_tools_lists_the_policy_tools_with_their_args(self):
        tools = {t["name"]: t for t in self.guard.tools()}
        self.assertEqual(sorted(tools), ["cat", "echo", "mail", "net", "netdeny", "say"])
        self.assertEqual(tools["cat"]["stdin"], "caller")
        self.assertEqual(tools["say"]["stdin"], {"arg": "text"})
        words = tools["echo"]["args"][0]
        self.assertEqual((words["name"], words["type"], words["required"]), ("words", "string", True))
        self.assertTrue(tools["mail"]["held"])

    def test_check_decides_without_running(self):
        self.assertEqual(self.guard.check("echo", {"words": "hi"}).decision, "allow")
        blocked = self.guard.check("echo", {"words": "Hi!"})
        self.assertEqual(blocked.decision, "block")
        self.assertIsNone(blocked.plan)
        self.assertEqual(self.guard.check("mail", {"to": "a"}).decision, "escalate")

    def test_run_returns_exit_code_output_and_receipt(self):
        result = self.guard.run("echo", {"words": "hello there"})
        self.assertEqual(result.exit_code, 0)
        self.assertEqual(result.stdout, b"hello there\n")
        self.assertEqual(result.receipt["execs"], ["/bin/echo"])
        self.assertEqual(result.receipt["verdict"], "conformed")
        self.assertFalse(result.diverged)
        self.assertTrue(result.call_id)

    def test_run_passes_stdin(self):
        result = self.guard.run("cat", input=b"through guard\n")
        self.assertEqual((result.exit_code, result.stdout), (0, b"through guard\n"))

    def test_run_without_input_says_so_and_a_tool_reading_stdin_is_refused(self):
        # The exec says "stdin": "none": cat would otherwise run on an empty stdin.
        with self.assertRaises(Blocked) as caught:
            self.guard.run("cat")
        self.assertEqual(caught.exception.decision, "block")
        self.assertIn('"stdin": "none"', caught.exception.message)
        # A tool that reads no input runs as before.
        self.assertEqual(self.guard.run("echo", {"words": "no input"}).stdout, b"no input\n")

    def test_input_is_a_tools_input_argument_when_it_has_one(self):
        result = self.guard.run("say", input=b"as an argument\n")
        self.assertEqual((result.exit_code, result.stdout), (0, b"as an argument\n"))
        given = self.guard.run("say", {"text": "given\n"}, input=b"not this\n")
        self.assertEqual(given.stdout, b"given\n")
        with self.assertRaises(RequestError) as caught:
            self.guard.run("say", input=b"\xff\xfe")
        self.assertEqual(caught.exception.field, "text")

    def test_a_blocked_call_raises_blocked_and_runs_nothing(self):
        with self.assertRaises(Blocked) as caught:
            self.guard.run("echo", {"words": "Not Allowed!"})
        self.assertEqual(caught.exception.decision, "block")
        self.assertTrue(caught.exception.call_id)
        self.assertIn("blocked by policy", str(caught.exception))

    def test_a_diverging_call_is_stopped_and_says_so(self):
        result = self.guard.run("net", {"addr": "127.0.0.1:10"})
        self.assertTrue(result.stopped)
        self.assertTrue(result.diverged)
        self.assertEqual(result.exit_code, 137)
        self.assertEqual(result.receipt["verdict"], "diverged")

    def test_a_held_call_waits_for_its_approval(self):
        holds = []

        def approve(hold):
            holds.append(hold)
            subprocess.run([os.environ["GUARD_CTL"], "approve", hold.call_id], check=True,
                           capture_output=True)

        result = self.guard.run("mail", {"to": "alice"}, on_hold=approve)
        self.assertEqual(len(holds), 1)
        self.assertEqual(holds[0].decision, "escalate")
        self.assertEqual((result.exit_code, result.stdout), (0, b"alice\n"))
        self.assertEqual(result.approved_by, 0)

    def test_a_held_call_not_waited_for_is_released_once_approved(self):
        with self.assertRaises(Held) as caught:
            self.guard.run("mail", {"to": "bob"}, no_wait=True)
        call_id = caught.exception.call_id
        # Released too early: still held, and it stays so.
        with self.assertRaises(Held):
            self.guard.release(call_id)
        subprocess.run([os.environ["GUARD_CTL"], "approve", call_id], check=True,
                       capture_output=True)
        result = self.guard.release(call_id)
        self.assertEqual((result.call_id, result.exit_code, result.stdout),
                         (call_id, 0, b"bob\n"))
        # Run once: released again, it is gone.
        with self.assertRaises(Blocked):
            self.guard.release(call_id)

    def test_a_bad_request_names_its_field(self):
        with self.assertRaises(RequestError) as caught:
            self.guard._request({"type": "check", "tool": "echo", "argz": {}})
        self.assertEqual(caught.exception.field, "argz")

    def test_no_guardd_is_unreachable_and_nothing_runs(self):
        gone = Client("/nonexistent/guard.sock")
        with self.assertRaises(Unreachable):
            gone.run("echo", {"words": "hi"})
        with self.assertRaises(guard_client.GuardError):
            gone.check("echo", {"words": "hi"})

    def test_a_lost_guardd_is_said_to_have_stopped_the_call_only_once_it_is_gone(self):
        # guardd's side as a stand-in, for the one thing a real guardd cannot be made to do on
        # cue: allow the call, say it started in a (real) cgroup, and die while a process in
        # that cgroup still runs (for half a second more).
        mount = next(line.split()[1] for line in open("/proc/mounts")
                     if line.split()[2] == "cgroup2")
        cgroup = tempfile.mkdtemp(dir=mount, prefix="guard-client-test-")
        call = subprocess.Popen(["sleep", "0.5"])
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(call.pid))
        d = tempfile.mkdtemp(dir="/run")
        path = os.path.join(d, "g.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen(1)

        def serve():
            conn, _ = server.accept()
            request = b""
            while b"\n" not in request:
                request += conn.recv(65536)
            started = {"v": 1, "type": "started", "call_id": "c-1", "pid": call.pid,
                       "cgroup": cgroup}
            conn.sendall(b'{"v":1,"type":"decision","call_id":"c-1","decision":"allow"}\n'
                         + json.dumps(started).encode() + b"\n")
            conn.close()
            server.close()

        serving = threading.Thread(target=serve)
        serving.start()
        try:
            with self.assertRaises(Unreachable) as caught:
                Client(path).run("echo", {"words": "hi"})
            still_running = call.poll() is None
        finally:
            serving.join()
            call.wait()
            shutil.rmtree(d)
            os.rmdir(cgroup)
        self.assertIn("the call was stopped: its processes are gone", str(caught.exception))
        self.assertFalse(still_running, "said stopped while the call's process ran")

    def test_events_follow_a_call(self):
        seen = []

        def follow():
            for event in self.guard.events(tool="echo"):
                seen.append(event)
                if event["kind"] == "exit":
                    return

        # A call made before guardd registered the subscription is not seen: call until one is.
        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        ids = []
        for _ in range(50):
            ids.append(self.guard.run("echo", {"words": "watched"}).call_id)
            thread.join(timeout=0.2)
            if not thread.is_alive():
                break
        self.assertFalse(thread.is_alive(), "no exit event arrived")
        self.assertEqual(seen[-1]["kind"], "exit")
        self.assertIn(seen[-1]["call_id"], ids)
        self.assertTrue(all(e.get("tool") == "echo" for e in seen), seen)


class ExampleTest(unittest.TestCase):
    """examples/langchain_tools.py, less LangChain itself: the schema and the call it wraps."""

    def test_the_example_wraps_a_guard_tool(self):
        import importlib.util

        path = os.path.join(os.path.dirname(__file__), "..", "examples", "langchain_tools.py")
        spec = importlib.util.spec_from_file_location("langchain_tools", path)
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
        client = Client()
        echo = next(t for t in client.tools() if t["name"] == "echo")
        self.assertEqual(example.schema(echo)["required"], ["words"])
        self.assertEqual(example.call(client, "echo", {"words": "wrapped"}), "wrapped\n")
        self.assertIn("refused by guard", example.call(client, "echo", {"words": "NO"}))

    def test_the_example_tells_the_model_of_a_divergence_the_call_survived(self):
        """Diverged under on_divergence = "deny", exit 0: not a plain success to the model."""
        import importlib.util

        path = os.path.join(os.path.dirname(__file__), "..", "examples", "langchain_tools.py")
        spec = importlib.util.spec_from_file_location("langchain_tools", path)
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
        text = example.call(Client(), "netdeny", {})
        self.assertIn("done", text)
        self.assertIn("not approved", text)


if __name__ == "__main__":
    unittest.main()
