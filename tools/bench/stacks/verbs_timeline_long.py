# Calls over a threshold in a verbs_timeline.sh trace: python3 verbs_timeline_long.py OUT US
import sys, glob, struct, collections
files = sorted(glob.glob(sys.argv[1] + '/shim.*.bin'))
ev = []
for r, f in enumerate(files):
    for x in struct.iter_unpack('<QQIIIIIIQ', open(f,'rb').read()): ev.append((x[0], x[1], r) + x[2:])
ev.sort()
thr = float(sys.argv[2]) * 1000
first = ev[len(ev)//4][0]; last = ev[-len(ev)//20][0]
tot = collections.Counter(); cnt = collections.Counter(); allc = collections.Counter(); allt = collections.Counter()
durs = collections.defaultdict(list)
for e in ev:
    if not (first <= e[0] <= last): continue
    d = e[1] - e[0]; key = (e[2], e[3]); allc[key] += 1; allt[key] += d
    durs[key].append(d)
    if d > thr: cnt[key] += 1; tot[key] += d
span = last - first
print('window %.1f ms' % (span / 1e6))
for k in sorted(allc):
    v = sorted(durs[k]); q = lambda f: v[int(f*(len(v)-1))]/1e3
    print('rank %d ev %d: %d calls, %.1f%% of time; p50 %.2f p90 %.2f p99 %.2f us; >%.0f us: %d calls, %.1f%% of time' % (k[0], k[1], allc[k], 100*allt[k]/span, q(.5), q(.9), q(.99), thr/1e3, cnt[k], 100*tot[k]/span))
# overlap of long calls between ranks
longs = [(e[0], e[1], e[2], e[3]) for e in ev if first <= e[0] <= last and e[1]-e[0] > thr]
ov = 0
for i, a in enumerate(longs):
    for b in longs[i+1:i+6]:
        if b[2] != a[2] and b[0] < a[1] and a[0] < b[1]: ov += 1; break
print('long calls', len(longs), 'overlapping a long call of the other rank', ov)
