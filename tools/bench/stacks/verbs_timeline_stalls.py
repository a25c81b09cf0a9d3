# What the slow messages of a verbs_timeline.sh trace taken with PERF=1 spent their extra time on:
#   python3 verbs_timeline_stalls.py OUT
# Messages (one rank's run of large posts, to the other rank's first large post) by length, each with
# the time either rank was off its CPU inside it, by what ran instead (the ranks' own droce-progress,
# anything else); then the calls over 30 us: how many had a guest event of their rank inside (switched
# out, a page fault, a function-call IPI) and how many had none, i.e. stayed on the CPU for that long
# inside the call. The perf trace is OUT/sched.txt (CLOCK_MONOTONIC, as the shim's records).
import bisect, collections, glob, re, struct, sys

out = sys.argv[1]
files = sorted(glob.glob(out + '/shim.*.bin'))
pids = [int(re.search(r'shim\.(\d+)\.bin', f).group(1)) for f in files]
line_re = re.compile(r'\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)')
switch_re = re.compile(r'prev_comm=(.*?) prev_pid=(\d+) .*? ==> next_comm=(.*?) next_pid=(\d+)')
trace = []  # (ns, comm, tid, cpu, event, args)
for line in open(out + '/sched.txt'):
    m = line_re.match(line)
    if m:
        trace.append((int(float(m.group(4)) * 1e9), m.group(1).strip(), int(m.group(2)), int(m.group(3)),
                      m.group(5), m.group(6)))
if not trace:
    sys.exit('no perf events in ' + out + '/sched.txt')
t_first, t_last = trace[0][0], trace[-1][0]
times = [x[0] for x in trace]

# Each rank's main thread off its CPU: (from, to, rank, what ran first in its place).
offs = []
for r, pid in enumerate(pids):
    since = None
    for t, _, _, _, ev, args in trace:
        if ev != 'sched:sched_switch':
            continue
        m = switch_re.search(args)
        if not m:
            continue
        if int(m.group(2)) == pid:
            since, runner = t, m.group(3)
        elif int(m.group(4)) == pid and since is not None:
            offs.append((since, t, r, runner))
            since = None

ev = []
for r, f in enumerate(files):
    for x in struct.iter_unpack('<QQIIIIIIQ', open(f, 'rb').read()):
        if t_first < x[0] < t_last:
            ev.append((x[0], x[1], r, x[2]))  # start, end, rank, kind (1 post, 2 poll, 4 SRQ post)
ev.sort()
# Posts of 1,000 bytes or more (the shim's b) start messages.
big = []
for r, f in enumerate(files):
    for x in struct.iter_unpack('<QQIIIIIIQ', open(f, 'rb').read()):
        if t_first < x[0] < t_last and x[2] == 1 and x[4] >= 1000:
            big.append((x[0], r))
big.sort()
starts, last_rank = [], None
for t0, r in big:
    if r != last_rank:
        starts.append(t0)
        last_rank = r

rows = []
for a, b in zip(starts, starts[1:]):
    off = collections.Counter()
    for x0, x1, r, runner in offs:
        if x1 > a and x0 < b:
            off['own progress thread' if runner == 'droce-progress' else 'other'] += min(x1, b) - max(x0, a)
    rows.append((b - a, off))
print('messages %d in %.2f s of trace' % (len(rows), (t_last - t_first) / 1e9))
for lo, hi in ((0, 60), (60, 80), (80, 150), (150, 1e9)):
    sel = [x for x in rows if lo * 1e3 <= x[0] < hi * 1e3]
    if not sel:
        continue
    n = len(sel)
    own = sum(x[1]['own progress thread'] for x in sel) / n / 1e3
    other = sum(x[1]['other'] for x in sel) / n / 1e3
    with_own = sum(1 for x in sel if x[1]['own progress thread'] > 0)
    print('  %4d-%-4s us: %6d (%4.1f %%) mean %7.1f us; off the CPU inside: own progress thread %5.1f us (in %d), '
          'other %7.1f us' % (lo, str(int(hi)) if hi < 1e9 else '', n, 100.0 * n / len(rows),
                              sum(x[0] for x in sel) / n / 1e3, own, with_own, other))

by_rank_events = collections.defaultdict(list)
for t, comm, tid, cpu, name, args in trace:
    if tid in pids:
        by_rank_events[pids.index(tid)].append((t, name))
kinds = collections.Counter()
quiet_us = []
for t0, t1, r, kind in ev:
    if kind not in (1, 2) or t1 - t0 <= 30000:
        continue
    rt = by_rank_events[r]
    i = bisect.bisect_left(rt, (t0, ''))
    inside = set()
    while i < len(rt) and rt[i][0] < t1:
        inside.add(rt[i][1])
        i += 1
    # a switch away from the rank shows as the rank's own sched_switch event (prev_pid)
    key = ('post' if kind == 1 else 'poll') + (' with ' + ','.join(sorted(inside)) if inside else ' with no event')
    kinds[key] += 1
    if not inside:
        quiet_us.append((t1 - t0) / 1e3)
print('calls over 30 us: %d' % sum(kinds.values()))
for k, v in kinds.most_common():
    print('  %6d %s' % (v, k))
if quiet_us:
    quiet_us.sort()
    print('  on the CPU with no event: median %.1f us, p90 %.1f us, total %.1f ms' % (
        quiet_us[len(quiet_us) // 2], quiet_us[int(0.9 * (len(quiet_us) - 1))], sum(quiet_us) / 1e3))
