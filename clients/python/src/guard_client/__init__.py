"""guard's Python client: guardd's socket protocol (the book's reference/protocol.md), standard library only.

A tool call goes to guardd like any other: guardd decides it, records it in its audit log, and
runs it confined. `run()` passes the tool's stdin, stdout and stderr as descriptors
(SCM_RIGHTS), as guard-exec does, so the tool writes to pipes this client reads.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import selectors
import socket as _socket
import struct
import termios
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

__all__ = [
    "Client",
    "Decision",
    "Result",
    "Hold",
    "Held",
    "GuardError",
    "Unreachable",
    "NotPermitted",
    "Busy",
    "Blocked",
    "RequestError",
    "CallFailed",
    "DEFAULT_SOCKET",
    "VERSION",
]

#: The protocol version this client speaks.
VERSION = 1
#: Where guardd listens unless told otherwise (GUARD_SOCKET overrides it).
DEFAULT_SOCKET = "/run/guard/guard.sock"
#: The most of stdout and of stderr `run()` keeps; the rest is read and counted.
MAX_OUTPUT = 16 << 20
#: Seconds to wait for a place in guardd's listen queue (GUARD_CONNECT_TIMEOUT overrides it).
CONNECT_TIMEOUT = 10.0
#: Seconds guardd may take to answer a request, or to take a call's (GUARD_REPLY_TIMEOUT).
REPLY_TIMEOUT = 30.0


class GuardError(Exception):
    """Anything guardd refused or could not do; the tool did not run unless said otherwise."""


class Unreachable(GuardError):
    """guardd is not there (or went away): nothing ran (fail closed)."""


class NotPermitted(GuardError):
    """guardd does not serve this caller for this request (`not permitted: ...`)."""


class Busy(GuardError):
    """guardd admits no call now (`busy`, or `not admitted` while its audit log has no room), or
    did not serve in time: no place in its listen queue within the connect timeout, a request
    not answered (a call not taken) within the reply timeout. Nothing ran: try again later."""


class RequestError(GuardError):
    """guardd rejected the request itself; `field` names the field at fault, when known."""

    def __init__(self, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.field = field


class Blocked(GuardError):
    """The policy refused the call, or it was held for a human and not approved."""

    def __init__(self, message: str, call_id: str, decision: str):
        super().__init__(f"{message} (call {call_id})")
        self.message = message
        self.call_id = call_id
        self.decision = decision


class CallFailed(GuardError):
    """guardd approved the call but could not carry it out (`exit` with an `error`), or the
    audit log could not record how it ended (`unrecorded`)."""

    def __init__(self, message: str, call_id: str):
        super().__init__(f"{message} (call {call_id})")
        self.call_id = call_id


class Held(GuardError):
    """The call is held for a human, and the caller did not wait for the answer (`run` with
    `no_wait`, or `release` before the answer): it stays held; `release(call_id)` runs it once
    it is approved."""

    def __init__(self, hold: "Hold"):
        super().__init__(f"call {hold.call_id} is held for review; release it once approved")
        self.hold = hold
        self.call_id = hold.call_id


@dataclass
class Decision:
    """The answer to `check`: the decision row and the plan an allowed call would run with."""

    decision: str
    reason: str
    check_name: str
    metadata: Dict[str, Any]
    plan: Optional[Dict[str, Any]]


@dataclass
class Hold:
    """A call held for a human (escalate, quarantine); the decision follows an admin's answer."""

    call_id: str
    decision: str
    message: str
    timeout_s: int


@dataclass
class Result:
    """A call that ran: how it ended, its output, and what guard saw it do."""

    call_id: str
    exit_code: Optional[int]
    stdout: bytes
    stderr: bytes
    diverged: bool
    stopped: bool
    receipt: Dict[str, Any] = field(default_factory=dict)
    approved_by: Optional[int] = None
    # Why guard killed it other than for a divergence (its timeout, its caller gone).
    killed: Optional[str] = None


def _with_cwd(request: Dict[str, Any], cwd: Optional[str]) -> Dict[str, Any]:
    """`request` with the caller's working directory, which picks a call's workspace."""
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:
            return request
    request["cwd"] = cwd
    return request


def _raise_held(hold: Hold) -> None:
    raise Held(hold)


def _raise_error(reply: Dict[str, Any]) -> None:
    message = reply.get("error", "guardd refused the request")
    if message.startswith("not permitted"):
        raise NotPermitted(message)
    if message.startswith("busy") or message.startswith("not admitted"):
        raise Busy(message)
    raise RequestError(message, reply.get("field"))


def _seconds(name: str, given: Optional[float], default: float) -> float:
    """`given`, else the environment's `name`, else `default`: a timeout in seconds, over 0."""
    if given is not None:
        value = float(given)
    else:
        text = os.environ.get(name)
        try:
            value = float(text) if text is not None else default
        except ValueError:
            raise RequestError(f"{name}={text}: not a number of seconds") from None
    if not value > 0:
        raise RequestError(f"{name}: a timeout must be more than 0 seconds, not {value}")
    return value


#: Seconds a caller that lost guardd waits to see its call's processes gone.
GONE_WITHIN = 10.0


def _lost(started: Optional[Dict[str, Any]]) -> str:
    """What became of a call whose guardd went away, as guard-exec says it: stopped only once
    its cgroup (which no process of the call can leave) says `populated 0`, or is gone."""
    if started is None:
        return ("guardd closed the connection before it said the call started; a call it had "
                "started dies with it")
    call_id, pid = started.get("call_id"), started.get("pid")
    events = os.path.join(started.get("cgroup", ""), "cgroup.events")
    deadline = time.monotonic() + GONE_WITHIN
    while True:
        try:
            with open(events) as f:
                if "populated 0" in f.read().splitlines():
                    break
        except OSError:
            if not os.path.exists(events):
                break  # a cgroup is removed only once empty
        if time.monotonic() >= deadline:
            return (f"guardd closed the connection while call {call_id} ran; its processes "
                    f"(the first, pid {pid}) were still there {GONE_WITHIN:g} s later, or "
                    "could not be seen")
        time.sleep(0.05)
    return (f"guardd closed the connection while call {call_id} ran; the call was stopped: "
            "its processes are gone")


def _unread(sock: _socket.socket) -> int:
    """The bytes sent on `sock` that guardd has not read yet (SIOCOUTQ)."""
    out = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    return struct.unpack("i", out)[0]


class _Conn:
    """One connection: frames out, frames in."""

    def __init__(self, path: str, connect_timeout: float, reply_timeout: float):
        self.path = path
        self.reply_timeout = reply_timeout
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        # A blocking connect waits while guardd's listen queue is full, as long as SO_SNDTIMEO
        # lets it, then fails with EAGAIN (a timeout set with settimeout() would not wait).
        whole = int(connect_timeout)
        timeval = struct.pack("ll", whole, int((connect_timeout - whole) * 1e6))
        self.sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, timeval)
        try:
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise Busy(f"guardd's listen queue at {path} stayed full for {connect_timeout} s: "
                           "guardd is busy; nothing ran") from e
            raise Unreachable(f"guardd unreachable at {path}: {e}; nothing ran") from e
        self.buf = b""

    def send(self, request: Dict[str, Any], fds: Optional[List[int]] = None) -> None:
        frame = json.dumps({"v": VERSION, **request}).encode() + b"\n"
        try:
            if fds:
                sent = _socket.send_fds(self.sock, [frame], fds)
                if sent < len(frame):
                    self.sock.sendall(frame[sent:])
            else:
                self.sock.sendall(frame)
        except OSError as e:
            # Refused at the door: guardd said why before it closed the connection.
            said = self._refusal()
            if said is not None:
                _raise_error(said)
            raise Unreachable(f"sending to guardd: {e}; nothing ran") from e

    def _refusal(self) -> Optional[Dict[str, Any]]:
        try:
            self.sock.settimeout(1)
            reply = self.recv()
        except GuardError:
            return None
        return reply if reply.get("type") == "error" else None

    def wait_taken(self) -> None:
        """Waits until guardd has read what was sent, or has something to say; `Busy` when
        neither within the reply timeout. From then on a call is guardd's to bound."""
        deadline = time.monotonic() + self.reply_timeout
        step = 0.001
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        while _unread(self.sock) > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Busy(f"guardd did not take the request within {self.reply_timeout} s: "
                           "guardd is busy; nothing ran")
            if poller.poll(max(1, int(min(step, left) * 1000))):
                return
            step = min(step * 2, 0.05)

    def feed(self, data: bytes) -> List[Dict[str, Any]]:
        """Frames completed by `data`; b"" means guardd closed the connection."""
        if not data:
            raise Unreachable("guardd closed the connection; the call, if it ran, was stopped")
        self.buf += data
        frames = []
        while b"\n" in self.buf:
            frames.append(self._pop())
        return frames

    def recv(self) -> Dict[str, Any]:
        while True:
            if b"\n" in self.buf:
                return self._pop()
            try:
                data = self.sock.recv(65536)
            except _socket.timeout as e:
                raise Busy(f"guardd did not answer within {self.sock.gettimeout()} s: "
                           "guardd is busy") from e
            except OSError as e:
                raise Unreachable(f"guardd: {e}") from e
            if not data:
                raise Unreachable("guardd closed the connection")
            self.buf += data

    def _pop(self) -> Dict[str, Any]:
        line, self.buf = self.buf.split(b"\n", 1)
        reply = json.loads(line)
        if reply.get("v") != VERSION:
            raise GuardError(f"guardd speaks protocol v{reply.get('v')}, this client v{VERSION}")
        return reply

    def close(self) -> None:
        self.sock.close()


class Client:
    """guardd at `socket` (else GUARD_SOCKET, else /run/guard/guard.sock).

    `connect_timeout` (else GUARD_CONNECT_TIMEOUT, else 10 s) bounds the wait for a place in
    guardd's listen queue; `timeout` (else GUARD_REPLY_TIMEOUT, else 30 s) the wait for an
    answer to a request, and for guardd to take a call's request in `run()`. Past either,
    `Busy`: nothing ran. A call guardd has taken is waited for as long as it, its review and a
    human's approval take (guardd bounds those); an event stream as long as it lasts.
    """

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None,
                 connect_timeout: Optional[float] = None):
        self.socket = socket or os.environ.get("GUARD_SOCKET") or DEFAULT_SOCKET
        self.timeout = _seconds("GUARD_REPLY_TIMEOUT", timeout, REPLY_TIMEOUT)
        self.connect_timeout = _seconds("GUARD_CONNECT_TIMEOUT", connect_timeout, CONNECT_TIMEOUT)

    def _connect(self) -> _Conn:
        return _Conn(self.socket, self.connect_timeout, self.timeout)

    def _request(self, request: Dict[str, Any]) -> Dict[str, Any]:
        conn = self._connect()
        try:
            conn.send(request)
            conn.sock.settimeout(self.timeout)
            reply = conn.recv()
        finally:
            conn.close()
        if reply.get("type") == "error":
            _raise_error(reply)
        return reply

    def check(
        self, tool: str, args: Optional[Dict[str, Any]] = None, cwd: Optional[str] = None
    ) -> Decision:
        """The policy's decision on a call, without running it.

        `cwd` (else this process's working directory) picks the call's workspace.
        """
        reply = self._request(_with_cwd({"type": "check", "tool": tool, "args": args or {}}, cwd))
        row = reply["decision"]
        return Decision(
            decision=row["decision"],
            reason=row.get("reason", ""),
            check_name=row.get("check_name", ""),
            metadata=row.get("metadata", {}),
            plan=reply.get("plan"),
        )

    def tools(self) -> List[Dict[str, Any]]:
        """The tools this caller may call, with their arguments' specs."""
        return self._request({"type": "tools"})["tools"]

    def status(self) -> Dict[str, Any]:
        """guardd's state: policy, layers, running calls."""
        return self._request({"type": "status"})

    def run(
        self,
        tool: str,
        args: Optional[Dict[str, Any]] = None,
        input: Optional[bytes] = None,
        on_hold: Optional[Callable[[Hold], None]] = None,
        cwd: Optional[str] = None,
        label: Optional[str] = None,
        no_wait: bool = False,
        message: Optional[str] = None,
        history: Optional[List[Dict[str, str]]] = None,
    ) -> Result:
        """Runs a tool through guardd and returns how it ended, with its output.

        `input` is the tool's input, for a tool whose policy says where it reads one: a tool
        with `stdin = "caller"` reads it on its stdin; one with `stdin = { arg = "NAME" }` gets
        it as its argument NAME (UTF-8 text) when `args` do not give that argument. Without
        `input` the exec says `"stdin": "none"`, and guardd refuses a tool that would read an
        empty stdin it did not ask for (`Blocked`). Its stdout and stderr are pipes read here.
        A call held for a human waits for the answer (`on_hold` is told once); a refusal raises
        `Blocked`, and guardd's other refusals their own `GuardError`. `cwd` (else this
        process's working directory) picks the call's workspace, where the policy has them.
        `label` says what the caller is within its agent (a subagent, a role): it is recorded,
        and may only narrow what the agent may call (`[agents.NAME.labels.LABEL]`).
        With `no_wait`, a held call raises `Held` at once and stays held: `release` it later.
        `message` (the model's message that came with the call) and `history` (the
        conversation before it, `[{"role": ..., "content": ...}]`, at most 16 turns) go to the
        call's judges and approvers and to the admin who answers it, secrets masked.
        """
        request: Dict[str, Any] = {"type": "exec", "tool": tool, "args": dict(args or {})}
        _with_cwd(request, cwd)
        if label is not None:
            request["label"] = label
        if no_wait:
            request["no_wait"] = True
        if message is not None:
            request["message"] = message
        if history:
            request["history"] = list(history)
        if input is None:
            request["stdin"] = "none"
        elif self._input_argument(tool, request["args"], input):
            input = None  # given as the argument; guardd writes it to the tool's stdin
        return self._call(request, input, on_hold, no_wait)

    def release(self, call_id: str) -> Result:
        """Runs held call `call_id` of this caller's if an admin approved it, as it was held,
        and returns how it ended. Still waiting, it raises `Held` and stays held; refused (or
        gone), `Blocked`. MCP clients get the same from guard-mcp's
        `retrieve_quarantined_tool_response`."""
        request = {"type": "resume", "call_id": call_id, "mode": "release"}
        return self._call(request, None, None, True)

    def _call(self, request, input, on_hold, held_raises) -> Result:
        """Sends `request` (an exec or a resume) with pipes as the call's stdio, and follows
        it to its end."""
        conn = self._connect()
        pipes = [os.pipe() for _ in range(3)]
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = pipes
        try:
            conn.send(request, [in_r, out_w, err_w])
            conn.wait_taken()
        except GuardError:
            for r, w in pipes:
                os.close(r)
                os.close(w)
            conn.close()
            raise
        # Ours closed: the pipes end when the tool's copies do.
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        # Each of ours closed once: a number closed twice may by then be another thread's file.
        open_fds = {in_w, out_r, err_r}
        try:
            if held_raises:
                on_hold = _raise_held
            return self._follow(conn, in_w, input or b"", out_r, err_r, on_hold, open_fds)
        finally:
            conn.close()
            for fd in open_fds:
                os.close(fd)

    def _input_argument(self, tool: str, args: Dict[str, Any], input: bytes) -> bool:
        """Puts `input` in `args` as the tool's input argument (`stdin = { arg = "NAME" }`),
        when it has one that `args` leave out; True when it did."""
        try:
            spec = next((t for t in self.tools() if t["name"] == tool), None)
        except GuardError:
            return False  # the exec meets the same refusal, and reports it
        stdin = (spec or {}).get("stdin")
        if not isinstance(stdin, dict) or stdin.get("arg") in args:
            return False
        name = stdin["arg"]
        try:
            args[name] = input.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RequestError(f"the input of '{tool}' is its string argument '{name}', and "
                               f"is not UTF-8 text: {e}", name) from e
        return True

    def _follow(self, conn, in_w, data, out_r, err_r, on_hold, open_fds) -> Result:
        sel = selectors.DefaultSelector()
        sel.register(conn.sock, selectors.EVENT_READ, "guardd")
        sel.register(out_r, selectors.EVENT_READ, "stdout")
        sel.register(err_r, selectors.EVENT_READ, "stderr")
        if data:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE, "stdin")
        else:
            open_fds.discard(in_w)
            os.close(in_w)
        output = {"stdout": bytearray(), "stderr": bytearray()}
        open_pipes = {"stdout", "stderr"}
        exit_reply = None
        approved_by = None
        # The call's start, with its cgroup: what tells a stopped call from a running one when
        # guardd goes away.
        started: Optional[Dict[str, Any]] = None
        while exit_reply is None or open_pipes:
            ready = sel.select(timeout=None if exit_reply is None else 5)
            if not ready:
                break  # ended, and something the tool left still holds a pipe: stop reading
            for key, _ in ready:
                name = key.data
                if name == "stdin":
                    try:
                        n = os.write(in_w, data)
                    except BrokenPipeError:
                        n = len(data)
                    data = data[n:]
                    if not data:
                        sel.unregister(in_w)
                        open_fds.discard(in_w)
                        os.close(in_w)
                elif name == "guardd":
                    chunk = conn.sock.recv(65536)
                    if not chunk:
                        raise Unreachable(_lost(started))
                    for reply in conn.feed(chunk):
                        kind = reply.get("type")
                        if kind == "error":
                            _raise_error(reply)
                        elif kind == "pending":
                            if on_hold:
                                on_hold(Hold(reply["call_id"], reply["decision"],
                                             reply.get("message", ""), reply.get("timeout_s", 0)))
                        elif kind == "decision" and reply["decision"] != "allow":
                            raise Blocked(reply.get("message", "blocked by policy"),
                                          reply["call_id"], reply["decision"])
                        elif kind == "decision":
                            approved_by = reply.get("approved_by")
                        elif kind == "started":
                            started = reply
                        elif kind == "exit":
                            exit_reply = reply
                            sel.unregister(conn.sock)
                else:
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fd)
                        open_pipes.discard(name)
                    elif len(output[name]) < MAX_OUTPUT:
                        output[name] += chunk[: MAX_OUTPUT - len(output[name])]
        sel.close()
        if exit_reply.get("error"):
            raise CallFailed(exit_reply["error"], exit_reply["call_id"])
        if exit_reply.get("unrecorded"):
            # The tool ran, but the audit log could not record how: not a success.
            raise CallFailed("the call ran (code %s), but the audit log could not record how it "
                             "ended: %s" % (exit_reply.get("code"), exit_reply["unrecorded"]),
                             exit_reply["call_id"])
        return Result(
            call_id=exit_reply["call_id"],
            exit_code=exit_reply.get("code"),
            stdout=bytes(output["stdout"]),
            stderr=bytes(output["stderr"]),
            diverged=exit_reply.get("diverged", False),
            stopped=exit_reply.get("stopped", False),
            killed=exit_reply.get("killed"),
            receipt=exit_reply.get("receipt") or {},
            approved_by=approved_by,
        )

    def events(self, tool: Optional[str] = None, call: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        """guardd's events as they happen (admins): decisions, launches, divergences, exits.

        Ends when guardd goes away (`Unreachable`) or drops a subscriber that fell behind (a
        final event of kind `lagged`).
        """
        conn = self._connect()
        try:
            request: Dict[str, Any] = {"type": "subscribe"}
            if tool is not None:
                request["tool"] = tool
            if call is not None:
                request["call"] = call
            conn.send(request)
            conn.sock.settimeout(self.timeout)
            first = conn.recv()
            if first.get("type") == "error":
                _raise_error(first)
            # From here the stream is as quiet as guardd is; guardd's keepalives are skipped.
            conn.sock.settimeout(None)
            while True:
                reply = conn.recv()
                if reply.get("type") == "keepalive":
                    continue
                if reply.get("type") == "error":
                    _raise_error(reply)
                event = {k: v for k, v in reply.items() if k not in ("v", "type")}
                yield event
                if event.get("kind") == "lagged":
                    return
        finally:
            conn.close()
