"""A minimal raw-socket RESP client for the bad-input tests (no redis-py involved)."""
from __future__ import annotations

import socket
import time

TIMEOUT_S = 5.0


class Raw:
    """One TCP connection to a replica; reads whole replies with a small RESP2/RESP3 parser."""

    def __init__(self, addr, timeout: float = TIMEOUT_S):
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.closed = False
        self.trace = b""  # the raw bytes of the replies parsed so far

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data: bytes) -> bool:
        """Sends `data`; False if the peer had already closed or reset the connection."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def _fill(self) -> bool:
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise EOFError(f"connection closed; unparsed {self.buf!r}")
        line, self.buf = self.buf.split(b"\r\n", 1)
        self.trace += line + b"\r\n"
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            if not self._fill():
                raise EOFError("connection closed inside a bulk reply")
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        self.trace += data + b"\r\n"
        return data

    def reply(self):
        """One reply: str for + and - (errors keep their '-'), int, bytes, None, list."""
        line = self._line()
        tag, rest = line[:1], line[1:]
        if tag in (b"+", b"-"):
            return (tag + rest).decode() if tag == b"-" else rest.decode()
        if tag == b":":
            return int(rest)
        if tag == b"_":
            return None
        if tag in (b"$", b"="):
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if tag in (b"*", b"~", b">"):
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        if tag == b"%":
            return {_hashable(self.reply()): self.reply() for _ in range(int(rest))}
        if tag == b",":
            return float(rest)
        if tag == b"#":
            return rest == b"t"
        raise ValueError(f"unexpected reply line {line!r}")

    def reply_bytes(self) -> bytes:
        """One reply as the raw bytes on the wire."""
        self.trace = b""
        self.reply()
        return self.trace

    def command(self, *args):
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.send(b"".join(parts))
        return self.reply()

    def wait_closed(self, timeout: float = TIMEOUT_S) -> bool:
        """True if the server closes the connection within `timeout` (left-over bytes are
        kept in the buffer)."""
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                self._fill()
            except socket.timeout:
                break
        return self.closed


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
