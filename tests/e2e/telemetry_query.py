#!/usr/bin/env python3
"""Queries droce-testpmd's DPDK telemetry socket (SOCK_SEQPACKET, JSON) for the
e2e test: /droce/port and /droce/qp must answer with counter dicts that show
traffic, /droce/qp,17 with QP 0x11's dict. Prints a one-line summary."""
import json
import socket
import sys
import time


def query(sock, cmd):
    sock.send(cmd.encode())
    return json.loads(sock.recv(1 << 16).decode())


def main():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1])
    json.loads(s.recv(1024).decode())  # the greeting: version, pid, max_output_len
    for _ in range(100):  # the socket exists from EAL start; droce's commands come once the port is up
        cmds = query(s, "/")["/"]
        if "/droce/port" in cmds:
            break
        time.sleep(0.1)
    assert "/droce/port" in cmds and "/droce/qp" in cmds, cmds
    for _ in range(50):  # until the engine moves data (a loaded machine connects slowly)
        port = query(s, "/droce/port")["/droce/port"]
        qps = query(s, "/droce/qp")["/droce/qp"]
        # The port counts the control QP's and ARP's frames too: wait for the data QP's own.
        if port["rx_packets"] > 0 and port["running"] and qps.get("17", {}).get("rx_packets", 0) > 0:
            break
        time.sleep(0.1)
    assert port["link_up"] == 1 and port["rx_packets"] > 0 and port["tx_packets"] > 0, port
    assert "17" in qps and qps["17"]["rx_packets"] > 0 and qps["17"]["qp_memory_bytes"] > 0, qps
    qp = query(s, "/droce/qp,17")["/droce/qp"]
    assert qp["qpn"] == 17 and qp["state"] == "RTS", qp
    print(f"port rx_packets={port['rx_packets']} running={port['running']} messages={port['messages']}; "
          f"qps={sorted(int(k) for k in qps)} qp17 rx_packets={qp['rx_packets']} qp_memory_bytes={qp['qp_memory_bytes']}")


if __name__ == "__main__":
    main()
