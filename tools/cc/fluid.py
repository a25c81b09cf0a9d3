#!/usr/bin/env python3
"""Fixed point of the DCQCN fluid model (Zhu et al., SIGCOMM 2015, Section 5).

For N identical flows through one RED/ECN bottleneck of capacity C the model is

  dq/dt   = N R_C - C
  p       = RED(q): 0 below Kmin, Pmax (q - Kmin)/(Kmax - Kmin) up to Kmax, 1 above
  dalpha  = g/tau' [A(p) - alpha]
  dR_T/dt = -(R_T - R_C)/tau a(p) + R_AI R_C p [(1-p)^(F B) / E_B + (1-p)^(F T R_C) / E_T]
  dR_C/dt = -R_C alpha/(2 tau) a(p) + (R_T - R_C)/2 R_C p [1/E_B + 1/E_T]

with rates in packets/s, a(p) = 1 - (1-p)^(tau R_C) the chance of a CNP in one
CNP interval tau, E_B = (1-p)^-B - 1 and E_T = (1-p)^-(T R_C) - 1 (expected
byte-counter and timer expiries between marks), A(p) = 1 - (1-p)^(tau' R_C)
the chance of a CNP in one alpha period tau' (tau' >= tau, the paper's case);
when tau' < tau (mlx5: alpha period 1 us, CNPs at most every 4 us) a CNP can
fall in at most one of tau/tau' alpha periods, so A = a tau'/tau.

At the fixed point R_C = C/N; dR_C/dt = 0 gives R_T - R_C = alpha a / (tau S)
with S = p (1/E_B + 1/E_T), and dR_T/dt = 0 then leaves one equation in p:

  alpha(p) a(p)^2 / (tau^2 S(p)) = R_AI R_C p [(1-p)^(F B)/E_B + (1-p)^(F T R_C)/E_T]

whose left side grows and right side shrinks with p: one root p*. The queue
follows from RED: q* = Kmin + (Kmax - Kmin) p*/Pmax if p* <= Pmax; if
p* > Pmax no queue below Kmax marks enough, so the queue sits at Kmax (where p
jumps from Pmax to 1) and RED's slope no longer decides it.

The model has no hyper increase, no rate_reduce_monitor_period and no
min_dec_fac (none of them matter for the paper profile's fixed point).

  tools/cc/fluid.py                 # table for N = 2, 4, 8, 16 at 25 and 100 Gb/s
  tools/cc/fluid.py --profile mlx5 --pmax 0.05
"""
import argparse
import math

FRAME = 1024 + 58  # droce-ccsim's packet on the wire (bytes)

PROFILES = {
    # tau = CNP interval (NP), tau_a = alpha period, T = rate-increase timer,
    # B = byte counter, F = fast-recovery stages, r_ai = R_AI, g.
    "paper": dict(tau=50e-6, tau_a=55e-6, T=55e-6, B=10e6, F=5, r_ai=40e6, g=1 / 256),
    "mlx5": dict(tau=4e-6, tau_a=1e-6, T=300e-6, B=32767, F=1, r_ai=5e6, g=5 / 1024),
}


def terms(p, R, prof):
    """alpha, a, S and the additive-increase rate (all per the model above) at marking p, rate R (pkt/s)."""
    tau, tau_a, T, F = prof["tau"], prof["tau_a"], prof["T"], prof["F"]
    B = prof["B"] / FRAME
    lq = math.log1p(-p)  # log(1 - p)
    a = -math.expm1(tau * R * lq)
    if tau_a >= tau:
        alpha = -math.expm1(tau_a * R * lq)
    else:
        alpha = a * tau_a / tau
    e_b = math.expm1(-B * lq)
    e_t = math.expm1(-T * R * lq)
    s = p * (1 / e_b + 1 / e_t)
    r_ai = prof["r_ai"] / (8 * FRAME)
    inc = r_ai * R * p * (math.exp(F * B * lq) / e_b + math.exp(F * T * R * lq) / e_t)
    return alpha, a, s, inc


def fixed_point(n, rate_bps, prof):
    """p*, R_T* - R_C* (b/s), alpha*, CNPs per flow per second at the fixed point."""
    R = rate_bps / n / (8 * FRAME)
    tau = prof["tau"]

    def f(p):
        alpha, a, s, inc = terms(p, R, prof)
        return alpha * a * a / (tau * tau * s) - inc

    lo, hi = 1e-12, 0.999
    for _ in range(200):  # bisection in log p
        mid = math.sqrt(lo * hi)
        if f(mid) > 0:
            hi = mid
        else:
            lo = mid
    p = math.sqrt(lo * hi)
    alpha, a, s, _ = terms(p, R, prof)
    gap = alpha * a / (tau * s) * 8 * FRAME
    return p, gap, alpha, a / tau


def red_queue(p, kmin, kmax, pmax):
    if p <= pmax:
        return kmin + (kmax - kmin) * p / pmax, False
    return kmax, True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=sorted(PROFILES), action="append")
    ap.add_argument("--rate-gbps", type=float, action="append")
    ap.add_argument("--senders", type=int, action="append")
    ap.add_argument("--kmin", type=float, default=5000)
    ap.add_argument("--kmax", type=float, default=200000)
    ap.add_argument("--pmax", type=float, default=0.01)
    a = ap.parse_args()
    profiles = a.profile or ["paper", "mlx5"]
    rates = a.rate_gbps or [25, 100]
    ns = a.senders or [2, 4, 8, 16]
    print("| profile | Gb/s | N | p* | alpha* | CNPs/flow/ms | R_T-R_C Mb/s | queue* KB (Kmin %g, Kmax %g, Pmax %g) | Pmax for q* mid-way |"
          % (a.kmin / 1000, a.kmax / 1000, a.pmax))
    print("|---|---|---|---|---|---|---|---|---|")
    for prof in profiles:
        for rate in rates:
            for n in ns:
                p, gap, alpha, cnps = fixed_point(n, rate * 1e9, PROFILES[prof])
                q, pinned = red_queue(p, a.kmin, a.kmax, a.pmax)
                qs = ("%.0f (p* > Pmax: at Kmax)" % (q / 1000)) if pinned else "%.1f" % (q / 1000)
                print("| %s | %g | %d | %.5f | %.4f | %.2f | %.1f | %s | %.3f |" % (
                    prof, rate, n, p, alpha, cnps / 1000, gap / 1e6, qs, 2 * p))


if __name__ == "__main__":
    main()
