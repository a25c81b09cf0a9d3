#!/usr/bin/env python3
"""Sends malformed and hostile requests to a running droced's control socket
(drivers/verbs/fabric.h): every one must get an error reply, none may attach,
and the daemon must keep answering. Usage: control_garbage.py RUN_DIR"""
import os, random, socket, struct, sys

MAGIC, VERSION = 0x64524F43, 2
OP_ATTACH, OP_STATUS, OP_SWITCH_SET = 1, 3, 6
KNOBS = 176  # KnobRequest, after the request
REQ = struct.Struct("<IHHII48s16s")  # magic version op size pid device want_qpn_base+link+reserved
HDR = struct.Struct("<IHHIi")         # reply: magic version op size error


def request(op=OP_ATTACH, device=b"droce0", pid=None, magic=MAGIC, version=VERSION, size=REQ.size,
            reserved=b""):
    return REQ.pack(magic, version, op, size, os.getpid() if pid is None else pid, device, reserved)


def call(sock, payload):
    sock.send(payload)
    data = sock.recv(65536)
    assert len(data) >= HDR.size, f"short reply ({len(data)} bytes) to {payload[:16]!r}"
    magic, version, op, size, error = HDR.unpack_from(data)
    assert magic == MAGIC and version == VERSION and size == len(data), "malformed reply"
    return error, data[HDR.size + 4 * 4 + 8 + 16 * 4 + 24 + 112:].split(b"\0")[0].decode(errors="replace")


def main():
    path = os.path.join(sys.argv[1], "droced.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    cases = [
        ("empty-ish", b"\0"),
        ("short", request()[:20]),
        ("long", request() + b"x" * 100),
        ("huge", b"A" * 4000),
        ("bad magic", request(magic=0xDEADBEEF)),
        ("bad version", request(version=7)),
        ("bad size field", request(size=3)),
        ("reserved set", request(reserved=b"\1")),
        ("unterminated name", request(device=b"x" * 48)),
        ("path in name", request(device=b"../../etc/passwd")),
        ("unknown device", request(device=b"nosuch")),
        ("someone else's pid", request(pid=1)),
        ("unknown op", request(op=999)),
        ("switch set without knobs", request(op=OP_SWITCH_SET)),
        ("switch set, short knobs", request(op=OP_SWITCH_SET, size=REQ.size + KNOBS) + b"\0" * (KNOBS - 1)),
        ("switch set, unknown knob bits", request(op=OP_SWITCH_SET, size=REQ.size + KNOBS) +
         struct.pack("<I", 1 << 20) + b"\0" * (KNOBS - 4)),
        ("switch set, unterminated mirror", request(op=OP_SWITCH_SET, size=REQ.size + KNOBS) +
         struct.pack("<I", 8) + b"\0" * 44 + b"/" * 112 + b"\0" * 16),
        ("switch set, unknown device", request(op=OP_SWITCH_SET, device=b"nosuch", size=REQ.size + KNOBS) +
         b"\0" * KNOBS),
        ("want_qpn_base unaligned", request(reserved=struct.pack("<I", 1025))),
        ("unknown link kind", request(reserved=struct.pack("<II", 0, 7))),
        ("link kind on a status request", request(op=OP_STATUS, reserved=struct.pack("<II", 0, 1))),
    ]
    rng = random.Random(14)
    for i in range(300):
        n = rng.randrange(1, 200)
        cases.append((f"random {i}", bytes(rng.randrange(256) for _ in range(n))))
        good = bytearray(request())
        for _ in range(3):
            good[rng.randrange(len(good))] = rng.randrange(256)
        cases.append((f"damaged {i}", bytes(good)))
        # Switch-set requests with random knob bodies (a valid one may pass: "damaged").
        knobs = bytearray(request(op=OP_SWITCH_SET, size=REQ.size + KNOBS) + bytes(KNOBS))
        for _ in range(4):
            knobs[REQ.size + rng.randrange(KNOBS)] = rng.randrange(256)
        cases.append((f"damaged knobs {i}", bytes(knobs)))
    errors = 0
    for name, payload in cases:
        error, message = call(s, payload)
        if error == 0 and not name.startswith("damaged"):
            print(f"FAIL: '{name}' was accepted")
            errors += 1
        elif error == 0:  # damage that left a valid attach of droce0: give it back
            s.close()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(path)
        elif not name.startswith(("random", "damaged")):
            print(f"ok: {name}: error {error} ({os.strerror(error)}): {message}")
    # Still alive and answering on a fresh connection.
    t = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    t.connect(path)
    error, _ = call(t, request(op=OP_STATUS, device=b""))
    assert error == 0, f"status after garbage: error {error}"
    print(f"{len(cases)} bad requests refused, daemon answers")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
