"""A fault-injecting HTTP proxy in front of an S3 server (moto's), for the tests that make store reads fail.

`FaultProxy(upstream)` listens on 127.0.0.1 and forwards every request to `upstream` (host:port) as it came,
except ranged GETs (a `Range` header) whose path contains `match`: those get `fault` instead, for the first
`times` of them (None: all of them). Faults:

- `("status", 500)`: an S3 error response (`InternalError` XML) with that status, the upstream never asked;
- `("stall", seconds)`: the upstream's answer held back that long (the connection stays open, no byte sent);
- `("reset", 0)`: the connection closed without an answer.

`hits` lists (method, path, range) of every faulted request. The proxy runs in threads of the test process, so a
job started as a subprocess reaches it over real TCP like any S3 endpoint.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class FaultProxy:
    """A threaded HTTP proxy to `upstream` that answers matching ranged GETs with a fault (see the module)."""

    def __init__(self, upstream: str, match: str = "/commitlog/", fault: tuple[str, float] = ("status", 500),
                 times: int | None = None):
        self.upstream = upstream
        self.match, self.fault, self.times = match, fault, times
        self.hits: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = proxy._fault_for(self.command, self.path, self.headers.get("Range"))
                if fault is not None:
                    kind, arg = fault
                    if kind == "status":
                        xml = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError</Code>"
                               b"<Message>We encountered an internal error. Please try again.</Message></Error>")
                        self.send_response(int(arg))
                        self.send_header("Content-Type", "application/xml")
                        self.send_header("Content-Length", str(len(xml)))
                        self.end_headers()
                        self.wfile.write(xml)
                        return
                    if kind == "stall":
                        proxy._stop.wait(arg)
                        if proxy._stop.is_set():
                            self.close_connection = True
                            return
                    if kind == "reset":
                        self.close_connection = True
                        return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in _HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                            self.send_header(k, v)
                    if self.command != "HEAD":
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _fault_for(self, method: str, path: str, byte_range: str | None) -> tuple[str, float] | None:
        if method != "GET" or not byte_range or self.match not in path:
            return None
        with self._lock:
            if self.times is not None and len(self.hits) >= self.times:
                return None
            self.hits.append((method, path, byte_range))
            return self.fault

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
