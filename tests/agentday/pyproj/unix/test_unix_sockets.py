"""What needs Unix sockets of its own: multiprocessing's Manager, the forkserver start method
(Python 3.14's default on Linux) and a server on a socket file. Not in the day's
`python3 -m unittest` (this directory is no package): run by the suite's open test."""

import multiprocessing
import os
import socket
import socketserver
import tempfile
import threading
import unittest


def cube(n):
    return n * n * n


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        self.wfile.write(self.rfile.readline().upper())


class UnixSockets(unittest.TestCase):
    def test_manager(self):
        with multiprocessing.Manager() as manager:
            shared = manager.dict()
            shared["k"] = 1
            self.assertEqual(dict(shared), {"k": 1})

    def test_forkserver_pool(self):
        with multiprocessing.get_context("forkserver").Pool(2) as pool:
            self.assertEqual(pool.map(cube, [1, 2, 3]), [1, 8, 27])

    def test_server_on_a_socket_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "echo.sock")
            with socketserver.UnixStreamServer(path, Echo) as server:
                threading.Thread(target=server.serve_forever, daemon=True).start()
                with socket.socket(socket.AF_UNIX) as client:
                    client.connect(path)
                    client.sendall(b"ping\n")
                    self.assertEqual(client.makefile().readline(), "PING\n")
                server.shutdown()


if __name__ == "__main__":
    unittest.main()
