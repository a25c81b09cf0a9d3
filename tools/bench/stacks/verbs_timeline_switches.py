# Involuntary context switches seen around the calls over 10 us of a verbs_timeline.sh trace: python3 verbs_timeline_switches.py OUT
import sys, glob, struct, collections
for r, f in enumerate(sorted(glob.glob(sys.argv[1] + '/shim.*.bin'))):
    recs = list(struct.iter_unpack('<QQIIIIIIQ', open(f,'rb').read()))
    longs = [x for x in recs if x[1]-x[0] > 10000]
    prev = None; inv = vol = 0; n = 0; both = 0
    # a long call whose csw counter moved since the previous long call's reading (upper bound on preempted long calls)
    for x in longs:
        c = x[8]; ni, nv = c >> 32, c & 0xffffffff
        if prev: inv += ni - prev[0] > 0; vol += nv - prev[1] > 0
        prev = (ni, nv)
    print('rank', r, 'long calls', len(longs), 'with involuntary switch since previous long call', inv, 'voluntary', vol, 'final counters inv/vol', prev)
