#!/usr/bin/env python3
"""Where a 1-QP `ib_write_bw -s 64` window's round trip goes (issue 36).

perftest signals every 100th WR of a 128-WR window; its next posts wait for
that WR's completion. This joins, per signaled WR, the client's and the
server's timestamps (TSC) that window_trace.patch records, and, with a
`perf record -e sched:sched_switch` taken meanwhile, names what ran instead
when the request took longer than 10 us to reach the server.

  git worktree add /work/trace HEAD --detach && cd /work/trace
  git apply tools/bench/verbs/window_trace.patch
  meson setup build-relg --buildtype=release -Db_ndebug=true && ninja -C build-relg
  rm -f /tmp/trace.*.csv
  BUILD=/work/trace/build-relg bash tools/verbs-pair.sh \
    "ib_write_bw -d droce0 -x 1 -p 18984 -s 64 -D 4" \
    "ib_write_bw -d droce1 -x 1 -p 18984 -s 64 -D 4 127.0.0.1" &
  sleep 3; perf record -k CLOCK_MONOTONIC -e sched:sched_switch -a -o /tmp/sw.data -- sleep 2
  wait; perf script -i /tmp/sw.data -F pid,tid,cpu,time,event,trace > /tmp/sw.txt
  python3 tools/bench/verbs/window_trace.py /tmp/sw.txt

Event kinds (the patch's): 1 the client built a signaled WR's packet, 2 the
client took an ACK (AckUpTo), 3 a poll_cq returned completions, 6 the first
empty poll_cq after one that returned some, 4 the server accepted a request
with AckReq, 5 the server built an ACK, 7/8 a progress thread's sleep began /
ended. Row 99 of each file: a TSC reading and CLOCK_MONOTONIC at the same
moment, to put the TSC on perf's clock.
"""
import bisect
import collections
import glob
import re
import sys


def tsc_mhz():
    for line in open('/proc/cpuinfo'):
        if line.startswith('cpu MHz'):
            return float(line.split(':')[1])
    raise SystemExit('no cpu MHz in /proc/cpuinfo')


def load():
    sides = {}
    for f in glob.glob('/tmp/trace.*.csv'):
        pid = int(f.split('.')[1])
        rows = [tuple(map(int, line.split(','))) for line in open(f)]
        calibration, rows = rows[0], rows[1:]
        side = 'client' if any(r[0] == 1 for r in rows[:200000]) else 'server'
        sides[side] = (pid, calibration, rows)
    if set(sides) != {'client', 'server'}:
        raise SystemExit('need one client and one server trace in /tmp/trace.*.csv')
    return sides


def quantiles(name, values):
    v = sorted(values)
    if not v:
        return
    total = sum(v)
    long_share = sum(x for x in v if x > 10) / total if total else 0
    print(f'{name:18s} p50 {v[len(v) // 2]:7.2f}  p90 {v[9 * len(v) // 10]:7.2f}  p99 {v[99 * len(v) // 100]:7.2f}'
          f'  mean {total / len(v):7.2f} us; share of the sum from waits over 10 us {long_share:.2f}')


def main():
    mhz = tsc_mhz()
    sides = load()

    def mono_ns(side, tsc):
        _, cal, _ = sides[side]
        return cal[3] + (tsc - cal[2]) * 1000 / mhz

    client, server = sides['client'][2], sides['server'][2]
    signaled = [(r[1], mono_ns('client', r[2])) for r in client if r[0] == 1]
    accepted = {}
    for r in server:
        if r[0] == 4:
            accepted.setdefault(r[1], mono_ns('server', r[2]))
    acks_built = [(mono_ns('server', r[2]), r[1]) for r in server if r[0] == 5]
    acks_taken = [(mono_ns('client', r[2]), r[1]) for r in client if r[0] == 2]
    completions = [mono_ns('client', r[2]) for r in client if r[0] == 3]
    first_empty = [mono_ns('client', r[2]) for r in client if r[0] == 6]

    def covers(ack_psn, psn):
        return ((ack_psn - psn) & 0xffffff) < 0x800000

    def first_after(t, events, psn):
        i = bisect.bisect_left(events, (t, 0))
        while i < len(events):
            if covers(events[i][1], psn):
                return events[i][0]
            i += 1
        return None

    parts = collections.defaultdict(list)
    cycles = []
    for psn, t_tx in signaled:
        t_rx = accepted.get(psn)
        if t_rx is None:
            continue
        t_ack = first_after(t_rx, acks_built, psn)
        t_back = first_after(t_ack, acks_taken, psn) if t_ack is not None else None
        if t_back is None:
            continue
        i = bisect.bisect_left(completions, t_back)
        if i == len(completions):
            continue
        t_done = completions[i]
        j = bisect.bisect_left(first_empty, t_tx)
        t_wait = first_empty[j] if j < len(first_empty) and first_empty[j] < t_done else t_done
        parts['request to server'].append((t_rx - t_tx) / 1000)
        parts['server to its ACK'].append((t_ack - t_rx) / 1000)
        parts['ACK to client'].append((t_back - t_ack) / 1000)
        parts['client stalled'].append((t_done - t_wait) / 1000)
        cycles.append((t_tx, t_rx))
    print(f'{len(cycles)} windows (signaled WRs joined end to end)')
    for name, values in parts.items():
        quantiles(name, values)

    if len(sys.argv) < 2:
        return
    switch = re.compile(r'^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:\s+(.*)$')
    thread_pid, switches = {}, []
    for line in open(sys.argv[1]):
        m = switch.match(line)
        if not m:
            continue
        pid, tid, _, t, rest = m.groups()
        thread_pid[int(tid)] = int(pid)
        f = dict(re.findall(r'(\w+)=(\S+)', rest))
        switches.append((float(t) * 1e9, int(f['prev_pid']), f['prev_state'], f['next_comm']))
    if not switches:
        return
    server_threads = {t for t, p in thread_pid.items() if p == sides['server'][0] and t != sides['server'][0]}
    client_main = sides['client'][0]
    times = [s[0] for s in switches]
    why_count, why_us = collections.Counter(), collections.Counter()
    for t_tx, t_rx in cycles:
        if t_rx - t_tx <= 10000 or t_tx < times[0] or t_rx > times[-1]:
            continue
        reason = 'no switch seen (the vCPU itself, or queueing)'
        for s in switches[bisect.bisect_left(times, t_tx - 50000):bisect.bisect_right(times, t_rx)]:
            if s[1] in server_threads:
                reason = f'server progress thread off ({s[2]}) for {s[3]}'
            elif s[1] == client_main:
                reason = f'client program thread off ({s[2]}) for {s[3]}'
        why_count[reason] += 1
        why_us[reason] += (t_rx - t_tx) / 1000
    print('requests over 10 us on their way to the server, by what ran instead:')
    for reason, n in why_count.most_common(10):
        print(f'{n:6d} {why_us[reason]:10.0f} us  {reason}')


if __name__ == '__main__':
    main()
