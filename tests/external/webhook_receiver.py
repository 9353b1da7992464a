"""A webhook receiver in a process of its own, for end-to-end tests: it records every POST and answers 200.

    python tests/external/webhook_receiver.py --port 8766 --record deliveries.jsonl

Each delivery is appended to the record file as one JSON line, ``{"path",
"headers", "body"}``, the body base64-encoded exactly as received (the
signature covers those bytes), and flushed before the answer is sent: the
record survives a kill. Prints ``ready on http://127.0.0.1:PORT`` once it
listens; SIGTERM or SIGKILL stops it. Standard library only.
"""

import argparse
import base64
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True, help="the JSON-lines file each delivery is appended to")
    options = parser.parse_args()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            line = json.dumps({"path": self.path, "headers": dict(self.headers),
                               "body": base64.b64encode(body).decode()})
            with open(options.record, "a") as record:
                record.write(line + "\n")
                record.flush()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    server = ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"ready on http://127.0.0.1:{options.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
