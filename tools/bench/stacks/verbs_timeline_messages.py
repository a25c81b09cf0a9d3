# The messages of a verbs_timeline.sh trace (tools/bench/stacks): python3 verbs_timeline_messages.py OUT MIN_BYTES [N]
import sys, glob, collections, struct, statistics

files = sorted(glob.glob(sys.argv[1] + '/shim.*.bin'))
ev = []
for r, f in enumerate(files):
    raw = open(f,'rb').read()
    for x in struct.iter_unpack('<QQIIIIIIQ', raw): ev.append((x[0], x[1], r) + x[2:])
ev.sort()
big = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
# message = run of large posts by one rank, ended when the other rank posts a large one
msgs = []; cur = None
for e in ev:
    t0, t1, r, k, a, b, c, en, et = e[:9]
    if k == 1 and b >= big:
        if cur is None or cur['r'] != r:
            cur = {'r': r, 'posts': [], 'rx': [], 'srq': [], 'empty': [0, 0, 0, 0]}; msgs.append(cur)
        cur['posts'].append((t0, t1, b))
    if cur is None: continue
    if k == 2 and r != cur['r'] and c > 0: cur['rx'].append((t0, t1, c, b, en, et))
    if k == 4 and r != cur['r']: cur['srq'].append((t0, t1, a))
    if r != cur['r']: cur['empty'][0] += en; cur['empty'][1] += et
    else: cur['empty'][2] += en; cur['empty'][3] += et
msgs = msgs[len(msgs)//4: -5]  # steady part
S = collections.defaultdict(list)
for i, m in enumerate(msgs[:-1]):
    p = m['posts']; nxt = msgs[i+1]['posts'][0][0]
    if not m['rx']: continue
    S['nposts'].append(len(p)); S['nrx_calls'].append(len(m['rx'])); S['nrx'].append(sum(x[2] for x in m['rx']))
    S['post_span'].append(p[-1][1] - p[0][0]); S['post_in_droce'].append(sum(x[1]-x[0] for x in p))
    S['first_rx_after_first_post'].append(m['rx'][0][1] - p[0][0])
    S['last_rx_after_last_post'].append(m['rx'][-1][1] - p[-1][1])
    S['rx_span'].append(m['rx'][-1][1] - m['rx'][0][1])
    S['poll_with_rx_in_droce'].append(sum(x[1]-x[0] for x in m['rx']))
    S['reply_after_last_rx'].append(nxt - m['rx'][-1][1])
    S['msg_total'].append(nxt - p[0][0])
    S['rx_empty_polls'].append(m['empty'][0]); S['rx_empty_ns'].append(m['empty'][1])
    S['tx_empty_polls'].append(m['empty'][2]); S['tx_empty_ns'].append(m['empty'][3])
    S['srq_posts'].append(len(m['srq'])); S['srq_wqes'].append(sum(x[2] for x in m['srq'])); S['srq_ns'].append(sum(x[1]-x[0] for x in m['srq']))
    gaps = [p[j+1][0] - p[j][1] for j in range(len(p)-1)]
    S['gap_between_posts_mean'].append(statistics.mean(gaps) if gaps else 0)
print('messages', len(msgs))
for k, v in S.items():
    v = sorted(float(x) for x in v); q = lambda f: v[int(f*(len(v)-1))]
    print('%-28s p25 %9.0f  med %9.0f  p75 %9.0f  mean %9.0f' % (k, q(.25), q(.5), q(.75), sum(v)/len(v)))
# a few typical messages in detail
if len(sys.argv) > 3:
    med = statistics.median(S['msg_total'])
    shown = 0
    for i, m in enumerate(msgs[:-1]):
        tot = msgs[i+1]['posts'][0][0] - m['posts'][0][0]
        if abs(tot - med) < 0.03 * med and shown < int(sys.argv[3]):
            shown += 1; base = m['posts'][0][0]
            print('--- message', i, 'total', tot)
            for x in m['posts']: print('  post  %7.2f..%7.2f  %d B' % ((x[0]-base)/1e3, (x[1]-base)/1e3, x[2]))
            for x in m['rx']: print('  rx    %7.2f..%7.2f  %d wc, %d B, empty polls before %d (%.2f us)' % ((x[0]-base)/1e3, (x[1]-base)/1e3, x[2], x[3], x[4], x[5]/1e3))
            for x in m['srq']: print('  srq   %7.2f..%7.2f  %d' % ((x[0]-base)/1e3, (x[1]-base)/1e3, x[2]))
            print('  next message starts %7.2f' % ((msgs[i+1]['posts'][0][0]-base)/1e3))
