"""A small HTTP proxy on loopback in front of an S3 server, that makes the faults of
a real network and a real object store on purpose: latency each way, a bandwidth
cap shared by every connection, and faults injected into chosen requests (a 503
SlowDown, a reset connection, a body cut short, a body with a byte changed), or a
server that is gone (refused connections) and comes back.

    p = S3Proxy(upstream_port, latency_s=0.01, rate_bps=200e6).start()
    p.inject("503", 2, match=lambda m, path, h: m == "GET")   # the next 2 GETs
    p.set_down(True); p.wait_refused(3); ...; p.set_down(False)
    p.counts["GET"], p.bytes_down, p.ranges                    # what went through
    p.stop()

It speaks HTTP/1.1 with keep-alive as libcurl and the S3 server do: requests with a
Content-Length body, responses with a Content-Length, chunked, or no body (HEAD,
204, 304). It keeps one upstream connection per client connection. The delays are
the simulated link's own, not waits of a test.
"""

import socket
import threading
import time

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')
HEAD_MAX = 64 * 1024


class _Closed(Exception):
    pass


def _read_head(sock, buf):
    while b"\r\n\r\n" not in buf:
        if len(buf) > HEAD_MAX:
            raise _Closed()
        d = sock.recv(65536)
        if not d:
            raise _Closed()
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head, rest


def _headers(head):
    lines = head.split(b"\r\n")
    h = {}
    for line in lines[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            h[k.strip().lower().decode()] = v.strip().decode()
    return lines[0].decode(), h


def _read_exact(sock, buf, n):
    while len(buf) < n:
        d = sock.recv(min(1 << 20, n - len(buf)))
        if not d:
            raise _Closed()
        buf += d
    return buf[:n], buf[n:]


def _read_chunked(sock, buf):
    """The raw bytes of a chunked body (passed through unchanged)."""
    out = b""
    while True:
        while b"\r\n" not in buf:
            d = sock.recv(65536)
            if not d:
                raise _Closed()
            buf += d
        line, buf = buf.split(b"\r\n", 1)
        size = int(line.split(b";")[0], 16)
        data, buf = _read_exact(sock, buf, size + 2)
        out += line + b"\r\n" + data
        if size == 0:
            return out, buf


class S3Proxy:
    def __init__(self, upstream_port, latency_s=0.0, rate_bps=None, host="127.0.0.1"):
        self.upstream = (host, upstream_port)
        self.latency_s = latency_s
        self.rate_bps = rate_bps
        self.port = None
        self.lock = threading.Lock()
        self.faults = []           # [kind, count, match]
        self.counts = {}
        self.faults_done = {}
        self.bytes_down = 0        # body bytes sent to clients
        self.ranges = []           # (path, first, last) of ranged GETs, if record_ranges
        self.record_ranges = False
        self._next_free = 0.0
        self._listener = None
        self._conns = set()
        self._down = False
        self._stopping = False
        self.refused = 0
        self.changed = threading.Condition(self.lock)

    # ------------------------------------------------------------ control
    def start(self):
        self._listen(0)
        return self

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def _listen(self, port):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(256)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def inject(self, kind, count=1, match=None):
        """The next `count` requests that `match(method, path, headers)` (default:
        ranged GETs) get fault `kind`: "503", "reset", "truncate" or "corrupt"."""
        assert kind in ("503", "reset", "truncate", "corrupt")
        match = match or (lambda m, p, h: m == "GET" and "range" in h)
        with self.lock:
            self.faults.append([kind, count, match])

    def set_down(self, down):
        """Down: every connection, open or new, is reset at once (a server that is
        gone), and counted in `refused`. Up: served again."""
        with self.lock:
            self._down = down
            conns = list(self._conns) if down else []
        for c in conns:
            self._reset(c)

    def wait_refused(self, n, timeout=60.0):
        """Waits until `n` connections were refused while down (the client tried
        again that often); returns whether it happened within the bound."""
        with self.changed:
            return self.changed.wait_for(lambda: self.refused >= n, timeout)

    def stop(self):
        self._stopping = True
        with self.lock:
            lst, conns = self._listener, list(self._conns)
            self._listener = None
        if lst:
            lst.close()
        for c in conns:
            self._reset(c)

    def reset_counts(self):
        with self.lock:
            self.counts, self.faults_done, self.bytes_down, self.ranges = {}, {}, 0, []

    # ------------------------------------------------------------ the link
    @staticmethod
    def _reset(sock):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
        except OSError:
            pass

    def _send(self, sock, data):
        """Sends through the shared bandwidth cap, in pieces."""
        step = 64 * 1024
        for i in range(0, len(data), step):
            piece = data[i:i + step]
            if self.rate_bps:
                with self.lock:
                    now = time.monotonic()
                    start = max(now, self._next_free)
                    self._next_free = start + len(piece) * 8 / self.rate_bps
                    until = self._next_free
                delay = until - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            sock.sendall(piece)

    def _take_fault(self, method, path, headers):
        with self.lock:
            for f in self.faults:
                kind, count, match = f
                if count > 0 and match(method, path, headers):
                    f[1] -= 1
                    self.faults_done[kind] = self.faults_done.get(kind, 0) + 1
                    return kind
        return None

    def _accept(self, lst):
        while True:
            try:
                c, _ = lst.accept()
            except OSError:
                return
            with self.lock:
                if self._down or self._stopping:
                    self._reset(c)
                    if self._down:
                        self.refused += 1
                        self.changed.notify_all()
                    continue
                self._conns.add(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, client):
        up = None
        buf = b""
        try:
            up = socket.create_connection(self.upstream, timeout=120)
            ubuf = b""
            while True:
                head, buf = _read_head(client, buf)
                line, h = _headers(head)
                method, path = line.split(" ")[:2]
                if h.get("expect", "").lower() == "100-continue":
                    # answered here, and not passed on: the proxy holds the body
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    head = b"\r\n".join(x for x in head.split(b"\r\n")
                                         if not x.lower().startswith(b"expect:"))
                body, buf = _read_exact(client, buf, int(h.get("content-length", "0")))
                with self.lock:
                    self.counts[method] = self.counts.get(method, 0) + 1
                    if self.record_ranges and "range" in h:
                        a, b = h["range"].split("=")[1].split("-")
                        self.ranges.append((path.split("?")[0], int(a), int(b)))
                if self.latency_s:
                    time.sleep(self.latency_s)
                fault = self._take_fault(method, path, h)
                if fault == "reset":
                    raise _Closed()
                if fault == "503":
                    resp = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                            b"Content-Length: " + str(len(SLOWDOWN)).encode() + b"\r\n\r\n")
                    if self.latency_s:
                        time.sleep(self.latency_s)
                    self._send(client, resp + SLOWDOWN)
                    continue
                up.sendall(head + b"\r\n\r\n" + body)
                while True:   # past any 1xx
                    rhead, ubuf = _read_head(up, ubuf)
                    status_line, rh = _headers(rhead)
                    status = int(status_line.split(" ")[1])
                    if not 100 <= status < 200:
                        break
                if method == "HEAD" or status in (204, 304):
                    rbody = b""
                elif rh.get("transfer-encoding", "").lower() == "chunked":
                    rbody, ubuf = _read_chunked(up, ubuf)
                else:
                    rbody, ubuf = _read_exact(up, ubuf, int(rh.get("content-length", "0")))
                if self.latency_s:
                    time.sleep(self.latency_s)
                if fault == "corrupt" and rbody:
                    i = len(rbody) // 2
                    rbody = rbody[:i] + bytes([rbody[i] ^ 0x40]) + rbody[i + 1:]
                if fault == "truncate" and rbody:
                    self._send(client, rhead + b"\r\n\r\n" + rbody[:len(rbody) // 2])
                    raise _Closed()
                self._send(client, rhead + b"\r\n\r\n" + rbody)
                with self.lock:
                    self.bytes_down += len(rbody)
        except (_Closed, OSError, ValueError, IndexError):
            pass
        finally:
            with self.lock:
                self._conns.discard(client)
            self._reset(client)
            if up:
                up.close()
