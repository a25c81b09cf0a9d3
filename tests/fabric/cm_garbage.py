#!/usr/bin/env python3
"""Sends malformed rdma_cm channel requests (drivers/rdmacm/cm_protocol.h) to a
running droced: each gets an error reply, the daemon keeps answering, and a
well-formed exchange still works. Usage: cm_garbage.py RUN_DIR"""
import os, random, socket, struct, sys

MAGIC, VERSION = 0x64524D43, 1
COMMAND, SYNC, REPLY, NOTIFY = 1, 2, 3, 4
REQ = struct.Struct("<IHHIIII")   # magic version kind size notifies_consumed command_len option_len
REP = struct.Struct("<IHHIiII")   # magic version kind size error events_pending payload_len
CMD_HDR = struct.Struct("<IHH")   # rdma_ucm_cmd_hdr: cmd in out
CREATE_ID = struct.Struct("<QQHB5x")  # uid response ps qp_type


def request(kind=COMMAND, command=b"", option=b"", version=VERSION, size=None, command_len=None):
    size = REQ.size + len(command) + len(option) if size is None else size
    clen = len(command) if command_len is None else command_len
    return REQ.pack(MAGIC, version, kind, size, 0, clen, len(option)) + command + option


def call(sock, payload):
    sock.send(payload)
    while True:
        data = sock.recv(65536)
        assert len(data) >= REP.size, f"short reply ({len(data)} bytes)"
        magic, version, kind, size, error, pending, plen = REP.unpack_from(data)
        assert magic == MAGIC and version == VERSION and size == len(data) == REP.size + plen, "malformed reply"
        if kind == NOTIFY:
            continue
        assert kind == REPLY
        return error, data[REP.size:]


def main():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(os.path.join(sys.argv[1], "droced.sock"))
    create = CMD_HDR.pack(0, CREATE_ID.size, 4) + CREATE_ID.pack(1, 0, 0x0106, 2)
    cases = [
        ("short", request()[:10], None),
        ("bad version", request(version=9), 93),  # EPROTONOSUPPORT
        ("size field lies", request(command=create, size=REQ.size), 22),
        ("command_len lies", request(command=create, command_len=5), 22),
        ("unknown kind", request(kind=77), 22),
        ("command too long", request(command=b"\0" * 2000), None),
        ("ucma header lies", request(command=CMD_HDR.pack(0, 200, 4) + CREATE_ID.pack(1, 0, 0x0106, 2)), 22),
        ("unknown ucma command", request(command=CMD_HDR.pack(99, 0, 0)), 38),  # ENOSYS
        ("CREATE_ID for a port space it lacks", request(command=CMD_HDR.pack(0, CREATE_ID.size, 4) +
                                                         CREATE_ID.pack(1, 0, 0x7777, 2)), 22),
        ("response too small", request(command=CMD_HDR.pack(0, CREATE_ID.size, 2) + CREATE_ID.pack(1, 0, 0x0106, 2)),
         28),  # ENOSPC
    ]
    for name, payload, want in cases:
        error, _ = call(s, payload)
        assert error != 0, f"{name}: accepted"
        assert want is None or error == want, f"{name}: error {error}, wanted {want}"
        print(f"ok  {name}: error {error}")
    rng = random.Random(15)
    for i in range(2000):
        body = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
        payload = request(command=body) if i % 2 else struct.pack("<I", MAGIC) + body
        call(s, payload)
    error, token = call(s, request(kind=SYNC))
    assert error == 0 and len(token) == 8 and token != b"\0" * 8, "sync after garbage"
    error, resp = call(s, request(command=create))
    assert error == 0 and len(resp) == 4, "CREATE_ID after garbage"
    print("ok  2000 random requests; the channel still works")


if __name__ == "__main__":
    main()
