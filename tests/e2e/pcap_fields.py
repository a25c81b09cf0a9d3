#!/usr/bin/env python3
"""Checks droce-testpmd --pcap-out captures for the e2e tests (no tshark needed).

  pcap_fields.py FILE --vlan V --pcp P --dscp D --ecn E
      every RoCEv2 frame (both directions) is 802.1Q-tagged with VLAN V and
      priority P and carries DSCP D and ECN codepoint E
  pcap_fields.py FILE --ipv6 --nd
      RoCEv2 runs over IPv6, and the capture holds a neighbour solicitation
      and an advertisement with hop limit 255 and a correct ICMPv6 checksum
Prints a one-line summary; exits 1 on any mismatch.
"""
import argparse
import struct
import sys


def frames(path):
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        sys.exit(f"{path}: not a little-endian pcap file")
    off = 24
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack("<IIII", data[off:off + 16])
        yield data[off + 16:off + 16 + caplen]
        off += 16 + caplen


def checksum16(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f">{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--vlan", type=int)
    ap.add_argument("--pcp", type=int)
    ap.add_argument("--dscp", type=int)
    ap.add_argument("--ecn", type=int)
    ap.add_argument("--ipv6", action="store_true")
    ap.add_argument("--nd", action="store_true")
    a = ap.parse_args()
    roce = bad = v4 = v6 = ns = na = bad_nd = 0
    macs = set()
    problems = []
    for f in frames(a.pcap):
        if len(f) < 14:
            continue
        et, off, tag = struct.unpack(">H", f[12:14])[0], 14, None
        if et == 0x8100:
            tag = struct.unpack(">H", f[14:16])[0]
            et, off = struct.unpack(">H", f[16:18])[0], 18
        if et == 0x0800:
            tclass, proto, l4 = f[off + 1], f[off + 9], off + (f[off] & 15) * 4
        elif et == 0x86DD:
            tclass = (struct.unpack(">I", f[off:off + 4])[0] >> 20) & 0xFF
            proto, l4 = f[off + 6], off + 40
            if proto == 58 and f[l4] in (135, 136):
                plen = struct.unpack(">H", f[off + 4:off + 6])[0]
                pseudo = f[off + 8:off + 40] + struct.pack(">IxxxB", plen, 58)
                ok = f[off + 7] == 255 and checksum16(pseudo + f[l4:l4 + plen]) == 0xFFFF
                ns += f[l4] == 135
                na += f[l4] == 136
                bad_nd += not ok
                continue
        else:
            continue
        if proto != 17 or struct.unpack(">H", f[l4 + 2:l4 + 4])[0] != 4791:
            continue
        roce += 1
        macs.add(f[6:12])
        v4 += et == 0x0800
        v6 += et == 0x86DD
        want = []
        if a.vlan is not None:
            want.append(("vlan", tag & 0xFFF if tag is not None else None, a.vlan))
        if a.pcp is not None:
            want.append(("pcp", tag >> 13 if tag is not None else None, a.pcp))
        if a.dscp is not None:
            want.append(("dscp", tclass >> 2, a.dscp))
        if a.ecn is not None:
            want.append(("ecn", tclass & 3, a.ecn))
        for name, got, exp in want:
            if got != exp:
                bad += 1
                if len(problems) < 3:
                    problems.append(f"frame {roce}: {name}={got}, want {exp}")
                break
    summary = f"roce_frames={roce} senders={len(macs)} mismatched={bad} ipv4={v4} ipv6={v6} ns={ns} na={na} bad_nd={bad_nd}"
    fail = roce == 0 or bad > 0 or len(macs) < 2
    if a.ipv6:
        fail |= v6 == 0 or v4 > 0
    if a.nd:
        fail |= ns == 0 or na == 0 or bad_nd > 0
    print(summary + ("" if not problems else " (" + "; ".join(problems) + ")"))
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
