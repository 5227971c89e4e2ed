import http.server
import json
import threading
import unittest
import urllib.request


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class LocalServer(unittest.TestCase):
    def test_get_from_a_server_on_loopback(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = "http://127.0.0.1:%d/status?x=1" % server.server_address[1]
            with urllib.request.urlopen(url, timeout=10) as reply:
                self.assertEqual(reply.status, 200)
                self.assertEqual(json.load(reply), {"path": "/status?x=1"})
        finally:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    unittest.main()
