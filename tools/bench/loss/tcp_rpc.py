#!/usr/bin/env python3
"""Completion time of a 64 KiB transfer over kernel TCP: the client sends SIZE
bytes, the server answers one byte once it has them all (as an RDMA WRITE's
completion needs the responder's ACK). Prints p50/p99/max in microseconds.

  tcp_rpc.py server PORT SIZE
  tcp_rpc.py client HOST PORT SIZE COUNT
"""
import socket
import sys
import time


def recv_exact(s, n):
    got = 0
    view = memoryview(bytearray(n))
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError
        got += k


def main():
    if sys.argv[1] == "server":
        port, size = int(sys.argv[2]), int(sys.argv[3])
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", port))
        ls.listen(1)
        c, _ = ls.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                recv_exact(c, size)
                c.sendall(b"k")
        except (EOFError, ConnectionResetError):
            return
    host, port, size, count = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    deadline = time.monotonic() + 20  # the server may still be starting on a loaded host
    while True:
        try:
            s = socket.create_connection((host, port))
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b"\x5a" * size
    times = []
    for _ in range(count):
        t = time.perf_counter_ns()
        s.sendall(buf)
        recv_exact(s, 1)
        times.append(time.perf_counter_ns() - t)
    s.close()
    times.sort()
    pick = lambda q: times[min(len(times) - 1, max(0, -(-int(q * len(times) * 1000) // 1000) - 1))] / 1000
    print(f"p50_us={pick(0.5):.1f} p99_us={pick(0.99):.1f} max_us={times[-1] / 1000:.1f}")


if __name__ == "__main__":
    main()
