#!/usr/bin/env python3
"""An rdma_cm event channel as unmodified librdmacm programs use it
(through ctypes, under droce-ctl env): its fd polls readable exactly when an
event waits, O_NONBLOCK makes rdma_get_cm_event fail with EAGAIN instead of
blocking, and the event then comes. Usage: cm_channel.py DEST_IPV4"""
import ctypes, ctypes.util, errno, fcntl, os, select, socket, struct, sys, threading, time

RDMA_PS_TCP = 0x0106
ADDR_RESOLVED = 0


class Channel(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int)]


class Event(ctypes.Structure):  # the leading fields of struct rdma_cm_event
    _fields_ = [("id", ctypes.c_void_p), ("listen_id", ctypes.c_void_p), ("event", ctypes.c_int),
                ("status", ctypes.c_int)]


def main():
    cm = ctypes.CDLL("librdmacm.so.1", use_errno=True)
    cm.rdma_create_event_channel.restype = ctypes.POINTER(Channel)
    ch = cm.rdma_create_event_channel()
    assert ch, f"rdma_create_event_channel: {os.strerror(ctypes.get_errno())}"
    fd = ch.contents.fd
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    ev = ctypes.POINTER(Event)()
    assert cm.rdma_get_cm_event(ch, ctypes.byref(ev)) != 0 and ctypes.get_errno() == errno.EAGAIN, \
        "an empty non-blocking channel must say EAGAIN"
    assert select.select([fd], [], [], 0.2)[0] == [], "an empty channel polled readable"
    cid = ctypes.c_void_p()
    assert cm.rdma_create_id(ch, ctypes.byref(cid), None, RDMA_PS_TCP) == 0, "rdma_create_id"
    dst = struct.pack("<H", socket.AF_INET) + struct.pack(">H", 7999) + socket.inet_aton(sys.argv[1]) + bytes(8)
    buf = ctypes.create_string_buffer(dst, len(dst))
    start = time.monotonic()
    assert cm.rdma_resolve_addr(cid, None, buf, 2000) == 0, f"rdma_resolve_addr: {os.strerror(ctypes.get_errno())}"
    assert select.select([fd], [], [], 2.0)[0] == [fd], "no readability for ADDR_RESOLVED"
    waited = time.monotonic() - start
    assert cm.rdma_get_cm_event(ch, ctypes.byref(ev)) == 0, f"rdma_get_cm_event: {os.strerror(ctypes.get_errno())}"
    assert ev.contents.event == ADDR_RESOLVED and ev.contents.status == 0, f"event {ev.contents.event}"
    cm.rdma_ack_cm_event(ev)
    assert select.select([fd], [], [], 0.2)[0] == [], "readable with no event left"
    assert cm.rdma_get_cm_event(ch, ctypes.byref(ev)) != 0 and ctypes.get_errno() == errno.EAGAIN, \
        "a second event appeared"
    assert cm.rdma_destroy_id(cid) == 0
    cm.rdma_destroy_event_channel(ch)
    # rping's way out: its event thread sits in a blocking rdma_get_cm_event
    # while main destroys the channel, and exits the process if that call
    # ever returns. Destroyed while the call waits (in its exchange with the
    # daemon or in its poll for the daemon's notification), it must never
    # return, as the kernel's read does not. (The waiter is given 5 ms to be
    # inside the call: one that has not read the channel's fd yet would read
    # a closed one, and the kernel would say EBADF too.)
    returned = []
    for i in range(40):
        c = cm.rdma_create_event_channel()
        assert c, f"rdma_create_event_channel: {os.strerror(ctypes.get_errno())}"
        started = threading.Event()
        def wait(c=c, started=started):
            e = ctypes.POINTER(Event)()
            started.set()
            r = cm.rdma_get_cm_event(c, ctypes.byref(e))
            returned.append((r, os.strerror(ctypes.get_errno())))
        threading.Thread(target=wait, daemon=True).start()
        started.wait()
        time.sleep(0.005 + (i % 8) * 0.0005)
        cm.rdma_destroy_event_channel(c)
    time.sleep(0.3)
    assert not returned, f"a blocking rdma_get_cm_event returned after its channel was destroyed: {returned[:3]}"
    print(f"ok: EAGAIN when empty, readable {waited * 1000:.1f} ms after rdma_resolve_addr, event ADDR_RESOLVED, "
          f"40 destroyed channels kept their waiters")


if __name__ == "__main__":
    main()
