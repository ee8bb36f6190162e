"""The DAG-driven engine's event loop, compiled with numba
(:mod:`~trainfabric.fabric.tasks.engine`).

One call runs the loop from the state's time until the graph is done, ``until_s``, or a comm
task needs routes that the current routing epoch has not computed yet (then it returns with
the connections to route and resumes where it stopped when called again). Per iteration:

1. every heap event due at ``t`` (task starts, task finishes) in ``(time, sequence)`` order:
   a timer pushes its finish at ``t + duration``; a comm task creates its flows (zero-byte
   flows arrive at once, after their path's propagation latency); a finish counts down its
   successors and pushes the start of each one it releases at ``release + latency``;
2. max-min rates of the flows in flight (:func:`trainfabric.fabric.flow.loop.solve_active`, the
   engine's progressive filling on the compact base, rebuilt only after flows joined);
3. the next event: the earliest projected completion (batched as the flow engine does when
   ``batch_rtol > 0``), the heap's top, or ``until_s``;
4. advance, lazily: a flow is settled (remaining wire bits fall by goodput x busy time;
   delivered bits, bits per route row and per link class and time bin are integrated over
   its constant-rate stretch) only when its rate changes, it completes, or the call stops at
   ``until_s``; its projected completion (``PROJ``) and the time its remaining bits fall
   below ``done_rtol`` x wire (``DUE``) sit in indexed heaps, so an event costs the changed
   flows, not every flow in flight;
5. completions (``DUE <= t``): a flow whose last wire bit left at ``sent`` arrives
   ``hops x hop_s`` later; the last arrival of a comm task is its finish, pushed on the heap.

Rates, settle times and projections live in the slot arrays, so a call boundary (routes
needed, a snapshot) changes no number; ``ldirty`` (per link) carries the links whose
components lost a flow into the next call.

The same statements as :mod:`trainfabric.fabric.flow.loop` for the flow part, so a flow
table written as a task graph gives the same finish times (tested to 1e-9). Rates are
re-solved only when flows joined or left; with single-link routes only where they can have
changed (:func:`_dirty_flows`, :func:`~trainfabric.fabric.maxmin.fill_local`): after flows
joined, the connected components that hold them; after flows left, the flows that fail the
bottleneck test (:func:`_violators`: one whose recorded bottleneck lost load or now carries
a faster flow, or that is faster than a re-solved flow on the link where that one froze),
re-solved with the others held, round after round with the flows solved so far, until no held
flow fails. Every flow then crosses a saturated link on which none is faster, which is
the characterisation of max-min fairness, so the rates are exact and a departure costs
the flows whose rates change and their neighbours, not the component. Where widening
spreads (past ``widen_flows`` flows or ``WIDEN_ROUNDS`` rounds), the departure rule of
:func:`_dirty_flows` solves it once instead (also exact). Only flows whose
rate changed are settled; a departed flow leaves ``act`` in O(1). The loop also returns
``FRESH`` when the flows in flight were all released now with nothing else in flight (the
driver then installs a replay of the set's isolated evolution, :func:`evolve`) and
``MATERIALIZE`` when a flow joins during a replay (the driver recomputes the replayed flows'
remaining bits at that time). A comm task whose flow set has a memo in this epoch
(``vm``, :class:`~trainfabric.fabric.tasks.state.SetMemo`) and starts with nothing in flight
runs as a *set-level replay* (``ic[RP] == 2``): one event at the memo's last flow event, no
flows in the slots; a comm task starting meanwhile returns ``VMATERIALIZE`` (the driver puts
the set's flows in flight with their remaining bits); see
:mod:`trainfabric.fabric.tasks.engine`.

The per-flow helpers take arrays, not tuples of them, and are compiled without numba's
reference counting (``_nrt=False``; they allocate nothing): every array a compiled function
receives or unpacks from a tuple costs an atomic increment and decrement wherever numba's
pruning fails (loops with early exits), which was 40% of an ECMP run's time.
"""

from __future__ import annotations

import numba
import numpy as np

from trainfabric.fabric.heap import (
    heap_le,
    heap_pop,
    heap_push,
    heap_remove,
    heap_set,
)
from trainfabric.fabric.maxmin import (
    fill_local,
    fill_scratch,
    rates_stand,
    rebottle,
    rebuild_base,
    solve_active,
)

COMM = 1
DONE, UNTIL, NEED_ROUTES, UNCONSTRAINED, FRESH, MATERIALIZE, VMATERIALIZE = range(7)
# integer counters in ``ic``
M, NFREE, HSIZE, HSEQ, EVENTS, SOLVES, PEAK, NEED, FLOWS_DONE, RP, RP_LEFT, RP_SEG = range(12)
LOCAL = 12  # 1 + whether the last call solved component-locally (0: no call yet)
SOLVED = 13  # flows whose rates were solved, summed over solves (the solves' work)
VTASK = 14  # the comm task of a set-level replay (``ic[RP] == 2``; it started at ``fc[1]``)
# component-local solving: the solves of whole connected components (after flows joined, or a
# call's first solve) and the flows they solved (part of SOLVED; the rest are departures')
COMP_SOLVES, COMP_SOLVED = 15, 16
N_COUNTERS = 17
# widening a departure's re-solve stops (the departure rule then solves it once) past
WIDEN_ROUNDS = 32  # rounds, or ``widen_flows`` flows (a parameter; default WIDEN_FLOWS)
WIDEN_FLOWS = 1024
# slot arrays (the flows in flight): one row per field, one column per slot, integer fields
# in ``si`` and real ones in ``sf`` (two 2-D arrays, not a tuple of 21: every read of a tuple's
# array in the loop cost numba a reference count, 40% of an ECMP run's time)
SLOT_FIELDS = (  # name, dtype, fill of a free slot: the rows of ``si``, then those of ``sf``
    ("row", np.int64, -1),
    ("task", np.int64, -1),
    ("conn", np.int64, -1),
    ("hops", np.int64, 0),
    ("flowlet", np.int64, 0),
    ("act", np.int64, -1),
    ("free", np.int64, -1),
    ("rp_idx", np.int64, -1),
    ("rem", np.float64, 0.0),
    ("wire", np.float64, 0.0),
    ("start", np.float64, 0.0),
    ("deliv", np.float64, 0.0),
    ("lost", np.float64, 0.0),
    ("rp_event", np.float64, 0.0),
    ("rp_sent", np.float64, 0.0),
    ("rp_deliv", np.float64, 0.0),
    ("rp_bits", np.float64, 0.0),
    ("tl", np.float64, 0.0),
    ("rate", np.float64, -1.0),
    ("proj", np.float64, np.inf),
    ("due", np.float64, np.inf),
)
INT_FIELDS = tuple(f for f in SLOT_FIELDS if f[1] is np.int64)
REAL_FIELDS = tuple(f for f in SLOT_FIELDS if f[1] is np.float64)
INT_FILL = np.array([fill for _, _, fill in INT_FIELDS], np.int64)
REAL_FILL = np.array([fill for _, _, fill in REAL_FIELDS])
ROW, TASK, CONN, HOPS, FLOWLET, ACT, FREE, RP_IDX = range(8)  # rows of ``si``
REM, WIRE, START, DELIV, LOST, RP_EVENT, RP_SENT, RP_DELIV, RP_BITS = range(9)  # rows of ``sf``
TL, RATE, PROJ, DUE = range(9, 13)  # lazy settlement: last settle time, rate, completions


@numba.njit(cache=True)
def _grown(a, size, fill):
    out = np.full(size, fill, a.dtype)
    out[: a.size] = a
    return out


@numba.njit(cache=True)
def _grown2(a, rows, fill):
    out = np.full((rows, a.shape[1]), fill, a.dtype)
    out[: a.shape[0]] = a
    return out


@numba.njit(cache=True)
def _grow_slots(si, sf, k):
    """Slot arrays with room for at least ``k`` more free slots (capacity doubles)."""
    S = si.shape[1]
    S2 = max(2 * S, S + k, 16)
    si2 = np.empty((si.shape[0], S2), np.int64)
    sf2 = np.empty((sf.shape[0], S2))
    for j in range(si.shape[0]):
        si2[j, :S] = si[j]
        si2[j, S:] = INT_FILL[j]
    for j in range(sf.shape[0]):
        sf2[j, :S] = sf[j]
        sf2[j, S:] = REAL_FILL[j]
    return si2, sf2, S2


@numba.njit(cache=True, _nrt=False)
def _bin_add(bins, bin_s, c, a, b, bits):
    """Spread ``bits`` evenly over ``[a, b]`` into the time bins of class ``c``."""
    if bits == 0.0 or b <= a:
        return
    last = bins.shape[0] - 1
    k0 = min(int(a // bin_s), last)
    k1 = min(int(b // bin_s), last)
    if k0 >= k1:
        bins[k0, c] += bits
        return
    dens = bits / (b - a)
    for k in range(k0, k1 + 1):
        lo = max(a, k * bin_s)
        hi = min(b, (k + 1) * bin_s) if k < k1 else b
        if hi > lo:
            bins[k, c] += dens * (hi - lo)


@numba.njit(cache=True)
def _ensure_bins(bins, bin_s, t_end):
    need = int(t_end // bin_s) + 1
    if need <= bins.shape[0]:
        return bins
    out = np.zeros((max(need, 2 * bins.shape[0]), bins.shape[1]))
    out[: bins.shape[0]] = bins
    return out


@numba.njit(cache=True, _nrt=False)
def _finish_task(i, tf, succ_ptr, succ, pending, ready, rel_by, lat, tfinish, ht, hs, hf, ic):
    """Task ``i`` finished at ``tf``: count down its successors (module doc)."""
    tfinish[i] = tf
    for e in range(succ_ptr[i], succ_ptr[i + 1]):
        s = succ[e]
        if tf > ready[s] or (tf == ready[s] and (rel_by[s] < 0 or i < rel_by[s])):
            ready[s] = tf
            rel_by[s] = i
        pending[s] -= 1
        if pending[s] == 0:
            ic[HSIZE] = heap_push(ht, hs, hf, ic[HSIZE], ready[s] + lat[s], ic[HSEQ], s)
            ic[HSEQ] += 1


@numba.njit(cache=True, _nrt=False)
def _replay_bins(bins, bin_s, seg_t, seg_b, ic, t, t_adv):
    """Add the memo's class loads of ``[t, t_adv]`` (segments are constant-rate)."""
    k = ic[RP_SEG]
    while k < seg_b.shape[0] and seg_t[k] < t_adv:
        a, b = seg_t[k], seg_t[k + 1]
        lo, hi = max(a, t), min(b, t_adv)
        if hi > lo and b > a:
            share = (hi - lo) / (b - a)
            for c in range(seg_b.shape[1]):
                _bin_add(bins, bin_s, c, lo, hi, seg_b[k, c] * share)
        if b <= t_adv:
            k += 1
        else:
            break
    ic[RP_SEG] = k


@numba.njit(cache=True, _nrt=False)
def _vbins(bins, bin_s, vm, q, t0, ic, t, t_adv):
    """:func:`_replay_bins` for a set-level replay of flow set ``q`` started at ``t0``
    (its memo's segments, offsets from the start, in ``vm``)."""
    k = ic[RP_SEG]
    tlo, blo, nseg = vm.seg_t_lo[q], vm.seg_b_lo[q], vm.n_seg[q]
    while k < nseg and t0 + vm.seg_t[tlo + k] < t_adv:
        a, b = t0 + vm.seg_t[tlo + k], t0 + vm.seg_t[tlo + k + 1]
        lo, hi = max(a, t), min(b, t_adv)
        if hi > lo and b > a:
            share = (hi - lo) / (b - a)
            for c in range(vm.seg_b.shape[1]):
                _bin_add(bins, bin_s, c, lo, hi, vm.seg_b[blo + k, c] * share)
        if b <= t_adv:
            k += 1
        else:
            break
    ic[RP_SEG] = k


@numba.njit(cache=True, inline="always")
def _vend(vm, q, fc):
    """When the set-level replay of flow set ``q`` has its last flow event."""
    return fc[1] + vm.end[q]


@numba.njit(cache=True, _nrt=False)
def _start_comm(
    i,
    t,
    lo,
    hi,
    flow_conn,
    flow_wire,
    conn_row,
    idle,
    flowlet,
    rlost,
    rhops,
    hop_s,
    gap,
    si,
    sf,
    left,
    arrive,
    ic,
):
    """Create the flows of comm task ``i`` (slots and routes are there)."""
    left[i] = hi - lo
    arrive[i] = t
    added = False
    for q in range(lo, hi):
        c = flow_conn[q]
        r = conn_row[c]
        if flow_wire[q] == 0.0:  # nothing to send: the message only propagates
            arrive[i] = max(arrive[i], t + rhops[r] * hop_s)
            left[i] -= 1
            ic[FLOWS_DONE] += 1
            if gap >= 0.0:
                idle[c] = t
            continue
        ic[NFREE] -= 1
        f = si[FREE][ic[NFREE]]
        si[ROW, f] = r
        si[TASK, f] = i
        si[CONN, f] = c
        sf[REM, f] = flow_wire[q]
        sf[WIRE, f] = flow_wire[q]
        sf[START, f] = t
        sf[DELIV, f] = 0.0
        sf[LOST, f] = rlost[r]
        si[HOPS, f] = rhops[r]
        si[FLOWLET, f] = flowlet[c]
        si[RP_IDX, f] = -1
        si[ACT][ic[M]] = f
        ic[M] += 1
        added = True
    ic[PEAK] = max(ic[PEAK], ic[M])
    return added


@numba.njit(cache=True, _nrt=False)
def _complete(f, sent_t, deliv, hop_s, gap, si, sf, idle, left, arrive, tbits, ht, hs, hf, ic, n):
    """Flow ``f`` sent its last bit at ``sent_t``; its task finishes with its last arrival."""
    i = si[TASK, f]
    arrive[i] = max(arrive[i], sent_t + si[HOPS, f] * hop_s)
    tbits[i] += deliv
    sf[REM, f] = 0.0
    left[i] -= 1
    ic[FLOWS_DONE] += 1
    if gap >= 0.0:
        idle[si[CONN, f]] = sent_t
    if left[i] == 0:
        ic[HSIZE] = heap_push(ht, hs, hf, ic[HSIZE], arrive[i], ic[HSEQ], i + n)
        ic[HSEQ] += 1
    si[TASK, f] = -1
    si[RP_IDX, f] = -1
    si[FREE][ic[NFREE]] = f
    ic[NFREE] += 1


@numba.njit(cache=True, _nrt=False)
def _fresh(si, sf, m, t):
    """Every flow in flight started at ``t`` and has sent nothing."""
    for j in range(m):
        f = si[ACT, j]
        if sf[START, f] != t or sf[REM, f] != sf[WIRE, f]:
            return False
    return True


@numba.njit(cache=True, _nrt=False)
def _settle(f, ts, si, sf, rbits, rcls, rclw, bins, bin_s):
    """Bring flow ``f`` from its last settle time to ``ts`` at its current rate: remaining
    and delivered bits, bits per route row and per class and time bin (the rate is constant
    over ``[TL, ts]``, so one uniform spread equals the per-event sums)."""
    r0 = sf[RATE, f]
    a = sf[TL, f]
    sf[TL, f] = ts
    if r0 <= 0.0:
        return
    b = min(sf[PROJ, f], ts)
    busy = b - a
    if busy <= 0.0:
        return
    gp = r0 * (1.0 - sf[LOST, f])
    sf[REM, f] -= gp * busy
    sf[DELIV, f] += gp * busy
    sent = r0 * busy
    r = si[ROW, f]
    rbits[r] += sent
    last = bins.shape[0] - 1
    k0 = min(int(a // bin_s), last)
    if k0 == min(int(b // bin_s), last):  # within one bin (the common case)
        for w in range(rcls.shape[1]):
            if rcls[r, w] < 0:
                break
            bins[k0, rcls[r, w]] += sent * rclw[r, w]
        return
    for w in range(rcls.shape[1]):
        c = rcls[r, w]
        if c < 0:
            break
        _bin_add(bins, bin_s, c, a, b, sent * rclw[r, w])


@numba.njit(cache=True, _nrt=False)
def _set_rate(
    f, t, nr, si, sf, rbits, rcls, rclw, bins, bin_s, done_rtol, hk1, hl1, hp1, hk2, hl2, hp2, sizes
):
    """Flow ``f`` runs at ``nr`` from ``t``: settle at the old rate, then its projected
    completion ``PROJ`` (last bit sent) and ``DUE`` (remaining <= done_rtol x wire), keyed in
    the indexed heaps ``hk1, hl1, hp1`` and ``hk2, hl2, hp2``."""
    _settle(f, t, si, sf, rbits, rcls, rclw, bins, bin_s)
    sf[RATE, f] = nr
    gp = nr * (1.0 - sf[LOST, f])
    if gp > 0.0:
        sf[PROJ, f] = t + sf[REM, f] / gp
        sf[DUE, f] = t + (sf[REM, f] - done_rtol * sf[WIRE, f]) / gp
    else:
        sf[PROJ, f] = np.inf
        sf[DUE, f] = np.inf
    sizes[0] = heap_set(hk1, hl1, hp1, sizes[0], f, sf[PROJ, f])
    sizes[1] = heap_set(hk2, hl2, hp2, sizes[1], f, sf[DUE, f])


@numba.njit(cache=True, _nrt=False)
def _link_insert(f, r, rsg, rsw, fg, fw, lhead, lnext, lprev):
    """Copy route row ``r``'s links (those with weight, inside ``lhead``) into slot ``f``'s
    compact ``fg``/``fw`` (int32 links then -1; the flows in flight stay in cache, not the
    route table) and link the slot into each link's member list (entries ``f x K + k``)."""
    K = rsg.shape[1]
    j = 0
    for k in range(K):
        g = rsg[r, k]
        if g < 0 or g >= lhead.size or rsw[r, k] <= 0.0:
            continue
        fg[f, j] = g
        fw[f, j] = rsw[r, k]
        v = f * K + j
        lprev[v] = -1
        lnext[v] = lhead[g]
        if lhead[g] >= 0:
            lprev[lhead[g]] = v
        lhead[g] = v
        j += 1
    for k in range(j, K):
        fg[f, k] = -1


@numba.njit(cache=True, _nrt=False)
def _link_remove(f, fg, lhead, lnext, lprev, ldirty, dl, ndl):
    """Unlink flow ``f`` from its links and mark them dirty (their components changed)."""
    K = fg.shape[1]
    for k in range(K):
        g = fg[f, k]
        if g < 0:
            break
        v = f * K + k
        if lprev[v] >= 0:
            lnext[lprev[v]] = lnext[v]
        else:
            lhead[g] = lnext[v]
        if lnext[v] >= 0:
            lprev[lnext[v]] = lprev[v]
        if not ldirty[g]:
            ldirty[g] = True
            dl[ndl] = g
            ndl += 1
    return ndl


@numba.njit(cache=True, _nrt=False)
def _dirty_flows(seeds, ns, dl, ndl, thr, rate, task, fg, fw, lhead, lnext, vis, lvis, fl, fz, lq):
    """The flows to solve (in search order) and the load ``fz`` of the others, held at
    their rates, on the links of those entered.

    A breadth-first search over shared links from the seed flows and the dirty links
    (those of departed flows) that enters flows without a rate yet or with a rate
    ``>= thr``. With ``thr = 0`` this is the union of the connected components that
    changed (max-min fairness decomposes over components); with ``thr = inf``, the seeds
    (and new flows next to them), whose rates :func:`_violators` certifies or widens.
    Exact when ``thr`` is at most the smallest rate of the flows that departed since the
    last solve and none joined: in progressive filling every flow below that rate froze at
    a link the departed flows do not cross, before they could matter, so its rate stands;
    by the bottleneck characterisation, the flows entered are then max-min fair on the
    capacity those held flows leave, and a flow at or above ``thr`` that the search cannot
    reach shares no link with any change. ``lq`` is the caller's queue of links (one entry
    per link at most: a link is queued once)."""
    K = fg.shape[1]
    nf = 0
    nl = 0
    for j in range(ns):
        f = seeds[j]
        if task[f] >= 0 and not vis[f]:
            vis[f] = True
            fl[nf] = f
            nf += 1
    for j in range(ndl):
        g = dl[j]
        if not lvis[g]:
            lvis[g] = True
            lq[nl] = g
            nl += 1
    pf = pl = 0
    while pf < nf or pl < nl:
        while pf < nf:
            f = fl[pf]
            pf += 1
            for k in range(K):
                g = fg[f, k]
                if g < 0:
                    break
                if not lvis[g]:
                    lvis[g] = True
                    lq[nl] = g
                    nl += 1
        while pl < nl:
            g = lq[pl]
            pl += 1
            held = 0.0
            entered = False
            v = lhead[g]
            while v >= 0:
                f = v // K
                if vis[f] or rate[f] < 0.0 or rate[f] >= thr:
                    entered = True
                    if not vis[f]:
                        vis[f] = True
                        fl[nf] = f
                        nf += 1
                else:
                    held += fw[f, v - f * K] * rate[f]
                v = lnext[v]
            if entered:  # the link is solved (fill_local resets it)
                fz[g] = held
    for j in range(nf):
        vis[fl[j]] = False
    for j in range(nl):
        lvis[lq[j]] = False
    return nf


@numba.njit(cache=True, _nrt=False)
def _violators(
    fl, nf, dl, ndl, fg, fw, newr, rate, bnew, bott, cap, lhead, lnext, mark, lvis, out, tol, lq
):
    """The held flows that may not keep their rates once ``fl[:nf]`` has its new rates
    ``newr`` and bottlenecks ``bnew`` (into ``out``; returns their count). The others then
    keep theirs exactly.

    Bottleneck characterisation: a feasible allocation is max-min fair iff every flow
    crosses a saturated link on which no flow is faster. The solved flows have one (the
    link at which they froze, saturated with the held load) unless a held flow on it is
    faster; a held flow keeps one unless it is its recorded bottleneck ``bott`` that the
    solved flows or a departure (a dirty link ``dl``) touched and which is no longer
    saturated or now carries a faster flow. So a held flow is returned when it is faster
    than the level of a solved flow's bottleneck it crosses, when its own bottleneck was
    touched and fails the test, or when that bottleneck is unknown (``-1``). Comparisons are
    relative, to ``tol``. ``mark`` (per slot) and ``lvis`` (per link) are scratch arrays of
    0 / False, restored; ``lq`` (per link) holds the links touched."""
    K = fg.shape[1]
    for j in range(nf):
        mark[fl[j]] = 1
    touched = lq  # each link once (lvis)
    nt = 0
    for j in range(ndl):
        if not lvis[dl[j]]:
            lvis[dl[j]] = True
            touched[nt] = dl[j]
            nt += 1
    for j in range(nf):
        f = fl[j]
        for k in range(K):
            g = fg[f, k]
            if g < 0:
                break
            if not lvis[g]:
                lvis[g] = True
                touched[nt] = g
                nt += 1
    nv = 0
    for j in range(nt):
        g = touched[j]
        lvis[g] = False
        load = 0.0
        fastest = 0.0
        level = np.inf  # of the solved flows bottlenecked here
        held = False
        v = lhead[g]
        while v >= 0:
            f = v // K
            r = newr[f] if mark[f] == 1 else rate[f]
            load += fw[f, v - f * K] * r
            fastest = max(fastest, r)
            if mark[f] == 1 and bnew[f] == g:
                level = min(level, r)
            held = held or mark[f] == 0
            v = lnext[v]
        if not held:
            continue
        saturated = load >= cap[g] * (1.0 - tol)
        v = lhead[g]
        while v >= 0:
            f = v // K
            v = lnext[v]
            r = rate[f]
            if mark[f] != 0 or r <= 0.0:
                continue
            if (
                r > level * (1.0 + tol)
                or bott[f] < 0
                or (bott[f] == g and (not saturated or fastest > r * (1.0 + tol)))
            ):
                mark[f] = 2
                out[nv] = f
                nv += 1
    for j in range(nf):
        mark[fl[j]] = 0
    for j in range(nv):
        mark[out[j]] = 0
    return nv


@numba.njit(cache=True)
def _due_conns(t, kind, flow_set, set_ptr, flow_conn, conn_row, heap, ic, need, n_need):
    """Add to ``need`` the unrouted connections of every comm task whose start is due at
    ``t`` (one return to the driver routes them all; without flowlets a connection's route
    does not depend on when in the epoch it is computed)."""
    ht, hf = heap.time, heap.item
    n = kind.size
    due = np.empty(ic[HSIZE], np.int64)
    nd = heap_le(ht, hf, ic[HSIZE], t, due)
    for j in range(nd):
        i = due[j]
        if i >= n or kind[i] != COMM:
            continue
        for q in range(set_ptr[flow_set[i]], set_ptr[flow_set[i] + 1]):
            c = flow_conn[q]
            if conn_row[c] == -1:
                conn_row[c] = -2
                need[n_need] = c
                n_need += 1
    return n_need


@numba.njit(cache=True)
def run_loop(
    graph,
    tstate,
    heap,
    conn,
    routes,
    si,
    sf,
    bins,
    ic,
    fc,
    need,
    groups,
    params,
    replay,
    ldirty,
    vm,
):
    """Run the graph (``graph``, ``tstate``, ``heap``, ``conn``, ``routes``, ``groups``,
    ``params``, ``replay``, ``vm``: the named tuples of :mod:`.state`) until done /
    ``until_s`` / routes needed / a fresh flow set (``memo``) / a flow joining a replay /
    a comm task starting during a set-level replay (module doc).
    Returns ``(status, slots, bins)``: the slot arrays and
    bins may have been reallocated. Flows are settled lazily (only when their rate changes,
    they complete, or the call stops at ``until_s`` with ``advance``); ``ldirty`` marks the
    links whose flows' rates must be solved again (kept across calls)."""
    kind, dur, lat = graph.kind, graph.duration_s, graph.latency_s
    succ_ptr, succ = graph.succ_ptr, graph.succ
    flow_set, set_ptr = graph.flow_set, graph.set_ptr
    flow_conn, flow_wire = graph.flow_conn, graph.flow_wire
    pending, ready, rel_by = tstate.pending, tstate.ready, tstate.rel_by
    tstart, tfinish = tstate.tstart, tstate.tfinish
    left, arrive, tbits = tstate.left, tstate.arrive, tstate.tbits
    ht, hs, hf = heap.time, heap.seq, heap.item
    conn_row, idle, flowlet = conn.row, conn.idle, conn.flowlet
    rsg, rsw, rlost, rhops = routes.group, routes.weight, routes.lost, routes.hops
    rcls, rclw, rbits = routes.cls, routes.clw, routes.bits
    cap, g_off = groups.capacity_bps, groups.offset
    g_ptr, g_link, g_coef = groups.ptr, groups.link, groups.coef
    hop_s, until_s, advance = params.hop_s, params.until_s, params.advance
    batch_rtol, done_rtol, rtol = params.batch_rtol, params.done_rtol, params.rtol
    gap, bin_s, memo = params.flowlet_gap_s, params.bin_s, params.memo
    local, widen, certify = params.local, params.widen, params.certify
    rp_seg_t, rp_seg_b = replay.seg_t, replay.seg_b
    virt = memo and gap < 0.0 and batch_rtol == 0.0  # set-level replays (module doc)
    n = kind.size
    K = rsg.shape[1]
    n_groups = g_off + g_ptr.size - 1
    n_links = cap.size
    S = si.shape[1]
    bsg = np.empty((max(16, ic[M]), K), np.int64)
    bsw = np.empty((max(16, ic[M]), K))
    bpos = np.full(S, -1, np.int64)
    nb = 0
    mptr = np.zeros(1, np.int64)
    members = np.zeros(0, np.int64)
    rebuild = True  # the solver's base must be rebuilt (flows joined, slots regrown)
    joined = False  # flows joined since the last rate step of this call
    rate = np.zeros(0)
    # lazy state of this call: heaps (PROJ, DUE, START: only to batch), link member lists;
    # indices as int32 (slots x route slots and links stay far below 2^31): half the cache
    # footprint of the per-link and per-slot lookups, a tenth of a 16,384-GPU run's time
    hk1, hl1, hp1 = np.empty(S), np.empty(S, np.int32), np.full(S, -1, np.int32)
    hk2, hl2, hp2 = np.empty(S), np.empty(S, np.int32), np.full(S, -1, np.int32)
    hk3, hl3, hp3 = np.empty(S), np.empty(S, np.int32), np.full(S, -1, np.int32)
    hsz = np.zeros(3, np.int64)
    lhead = np.full(n_links, -1, np.int32)
    lnext = np.full(S * K, -1, np.int32)
    lprev = np.full(S * K, -1, np.int32)
    fg = np.full((S, K), -1, np.int32)  # per slot: its links (compact copy of its route row)
    fw = np.zeros((S, K))
    bott = np.full(S, -1, np.int32)  # per slot: the link it froze at in its last solve
    bnew = np.full(S, -1, np.int32)  # the same in the solve under way (committed at its end)
    viol = np.empty(S, np.int64)
    vis = np.zeros(S, np.bool_)
    lvis = np.zeros(n_links, np.bool_)
    newr = np.zeros(S)
    fl = np.empty(S, np.int64)
    seeds = np.empty(S, np.int64)
    ns = 0
    dl = np.empty(n_links, np.int64)
    lq = np.empty(n_links, np.int64)  # _dirty_flows' queue of links
    fwf, fwi = fill_scratch(n_links)  # fill_local's scratch
    ndl = 0
    for g in range(n_links):
        if ldirty[g]:
            dl[ndl] = g
            ndl += 1
    lmap = np.full(n_links, -1, np.int32)
    nbott = np.zeros(n_links, np.int32)  # split modes: flows in flight bottlenecked per link
    fz = np.zeros(n_links)  # load of flows held at their rates, per link (_dirty_flows)
    whole = True  # solve whole components: flows joined, or the call's first solve
    thr = np.inf  # the smallest rate of the flows that departed since the last solve
    apos = np.full(S, -1, np.int64)  # index of each slot in ``act``
    fstate = np.zeros(S, np.int8)  # fill_local's scratch
    stale = not local or ndl > 0
    same = ic[LOCAL] == 1 + local  # else the last call solved in the other way: all again
    ic[LOCAL] = 1 + local
    for j in range(ic[M]):
        f = si[ACT, j]
        apos[f] = j
        _link_insert(f, si[ROW, f], rsg, rsw, fg, fw, lhead, lnext, lprev)
        if batch_rtol > 0:
            hsz[2] = heap_set(hk3, hl3, hp3, hsz[2], f, sf[START, f])
        if ic[RP] == 1:  # a replay: its flows complete at their memo's event times
            hsz[1] = heap_set(hk2, hl2, hp2, hsz[1], f, sf[RP_EVENT, f])
        elif sf[RATE, f] >= 0.0:
            hsz[0] = heap_set(hk1, hl1, hp1, hsz[0], f, sf[PROJ, f])
            hsz[1] = heap_set(hk2, hl2, hp2, hsz[1], f, sf[DUE, f])
        if (sf[RATE, f] < 0.0 or not same) and ic[RP] == 0:
            seeds[ns] = f
            ns += 1
            stale = True
    done_list = np.empty(16, np.int64)
    t = fc[0]
    while True:
        # -- 1. heap events due at t
        while ic[HSIZE] > 0 and ht[0] <= t:
            e = hf[0]
            if e >= n:  # a finish
                tf = ht[0]
                _, ic[HSIZE] = heap_pop(ht, hs, hf, ic[HSIZE])
                _finish_task(
                    e - n, tf, succ_ptr, succ, pending, ready, rel_by, lat, tfinish, ht, hs, hf, ic
                )
                continue
            i = e
            lo = hi = 0
            if kind[i] == COMM:
                q = flow_set[i]
                lo, hi = set_ptr[q], set_ptr[q + 1]
                if ic[RP] == 2:  # flows would join a set-level replay: materialize it first
                    fc[0] = t
                    return VMATERIALIZE, si, sf, bins
                if virt and ic[M] == 0 and ic[RP] == 0 and vm.ok[q]:  # alone, solved before
                    _, ic[HSIZE] = heap_pop(ht, hs, hf, ic[HSIZE])
                    tstart[i] = t
                    left[i] = vm.n_flows[q]
                    arrive[i] = t
                    ic[RP], ic[VTASK], ic[RP_SEG] = 2, i, 0
                    fc[1] = t
                    ic[PEAK] = max(ic[PEAK], vm.n_flows[q])
                    continue
                if ic[NFREE] < hi - lo:
                    S_old = S
                    si, sf, S = _grow_slots(si, sf, hi - lo)
                    for q in range(S_old, S):
                        si[FREE][ic[NFREE]] = q
                        ic[NFREE] += 1
                    bpos = np.full(S, -1, np.int64)
                    hk1, hl1, hp1 = _grown(hk1, S, 0.0), _grown(hl1, S, -1), _grown(hp1, S, -1)
                    hk2, hl2, hp2 = _grown(hk2, S, 0.0), _grown(hl2, S, -1), _grown(hp2, S, -1)
                    hk3, hl3, hp3 = _grown(hk3, S, 0.0), _grown(hl3, S, -1), _grown(hp3, S, -1)
                    lnext = _grown(lnext, S * K, -1)
                    lprev = _grown(lprev, S * K, -1)
                    fg, fw = _grown2(fg, S, -1), _grown2(fw, S, 0.0)
                    bott, viol = _grown(bott, S, -1), _grown(viol, S, -1)
                    bnew = _grown(bnew, S, -1)
                    vis = _grown(vis, S, False)
                    newr = _grown(newr, S, 0.0)
                    fl = _grown(fl, S, -1)
                    seeds = _grown(seeds, S, -1)
                    apos = _grown(apos, S, -1)
                    fstate = _grown(fstate, S, 0)
                    rebuild = True
                n_need = 0
                for q in range(lo, hi):
                    c = flow_conn[q]
                    if gap >= 0.0 and t - idle[c] >= gap:  # a new flowlet: re-hash
                        flowlet[c] += 1
                        conn_row[c] = -1
                    if gap >= 0.0:
                        idle[c] = np.inf
                    if conn_row[c] == -1:
                        conn_row[c] = -2
                        need[n_need] = c
                        n_need += 1
                if n_need > 0:
                    if gap < 0.0:  # routes are per connection: those of every start due now
                        n_need = _due_conns(
                            t, kind, flow_set, set_ptr, flow_conn, conn_row, heap, ic, need, n_need
                        )
                    ic[NEED] = n_need
                    fc[0] = t
                    return NEED_ROUTES, si, sf, bins
            _, ic[HSIZE] = heap_pop(ht, hs, hf, ic[HSIZE])
            tstart[i] = t
            if kind[i] != COMM:
                ic[HSIZE] = heap_push(ht, hs, hf, ic[HSIZE], t + dur[i], ic[HSEQ], i + n)
                ic[HSEQ] += 1
                continue
            m0 = ic[M]
            if _start_comm(
                i,
                t,
                lo,
                hi,
                flow_conn,
                flow_wire,
                conn_row,
                idle,
                flowlet,
                rlost,
                rhops,
                hop_s,
                gap,
                si,
                sf,
                left,
                arrive,
                ic,
            ):
                rebuild = joined = stale = whole = True
                for j in range(m0, ic[M]):
                    f = si[ACT, j]
                    apos[f] = j
                    sf[TL, f] = t
                    sf[RATE, f] = -1.0
                    _link_insert(f, si[ROW, f], rsg, rsw, fg, fw, lhead, lnext, lprev)
                    if batch_rtol > 0:
                        hsz[2] = heap_set(hk3, hl3, hp3, hsz[2], f, t)
                    seeds[ns] = f
                    ns += 1
            if left[i] == 0:
                ic[HSIZE] = heap_push(ht, hs, hf, ic[HSIZE], arrive[i], ic[HSEQ], i + n)
                ic[HSEQ] += 1
        m = ic[M]
        act = si[ACT]
        replaying = ic[RP] == 1
        virtual = ic[RP] == 2
        vq = flow_set[ic[VTASK]] if virtual else -1
        if replaying and joined:
            fc[0] = t
            return MATERIALIZE, si, sf, bins
        if not replaying and joined and memo and m > 0 and _fresh(si, sf, m, t):
            fc[0] = t
            return FRESH, si, sf, bins
        joined = False
        # -- 2. rates (or the memo's completion times)
        t1 = np.inf
        if replaying:
            if hsz[1] > 0:
                t1 = hk2[0]
        elif virtual:
            t1 = _vend(vm, vq, fc)
        else:
            if stale and m > 0:  # else only timers fired since the last solve: same rates
                stale = False
                ic[SOLVES] += 1
                if local:  # re-solve only where rates can change (module doc)
                    rounds, nd, thr_r = 0, ndl, 0.0 if whole else np.inf
                    while True:  # solve, then widen by the held flows that cannot stay
                        nf = _dirty_flows(
                            seeds,
                            ns,
                            dl,
                            nd,
                            thr_r,
                            sf[RATE],
                            si[TASK],
                            fg,
                            fw,
                            lhead,
                            lnext,
                            vis,
                            lvis,
                            fl,
                            fz,
                            lq,
                        )
                        bad = 0
                        if nf > 0:
                            bad = fill_local(
                                fl,
                                nf,
                                fg,
                                fw,
                                sf[LOST],
                                cap,
                                lmap,
                                rtol,
                                newr,
                                fz,
                                lhead,
                                lnext,
                                fstate,
                                bnew,
                                fwf,
                                fwi,
                            )
                        ic[SOLVED] += nf
                        if whole:
                            ic[COMP_SOLVES] += 1
                            ic[COMP_SOLVED] += nf
                        if bad or whole or rounds < 0:  # components: none next to them held
                            break
                        nv = _violators(
                            fl,
                            nf,
                            dl,
                            ndl,
                            fg,
                            fw,
                            newr,
                            sf[RATE],
                            bnew,
                            bott,
                            cap,
                            lhead,
                            lnext,
                            fstate,
                            lvis,
                            viol,
                            4.0 * rtol,
                            lq,
                        )
                        if nv == 0:
                            break
                        rounds += 1
                        ns, nd = nf + nv, 0
                        if rounds > WIDEN_ROUNDS or ns > widen:  # spreading: the departure rule
                            ns, nd, rounds = 0, ndl, -1
                            thr_r = thr * (1.0 - 1e-6) if thr < np.inf else 0.0
                        else:
                            seeds[:nf] = fl[:nf]
                            seeds[nf:ns] = viol[:nv]
                    for j in range(nf):
                        bott[fl[j]] = bnew[fl[j]]
                    whole = False
                    thr = np.inf
                else:
                    if rebuild:
                        if bsg.shape[0] < m:
                            bsg = np.empty((2 * m, K), np.int64)
                            bsw = np.empty((2 * m, K))
                        nb, mptr, members = rebuild_base(
                            act, m, si[ROW], rsg, rsw, sf[LOST], n_groups, bsg, bsw, bpos
                        )
                        rebuild = False
                    rate, bad, sb = solve_active(
                        act,
                        m,
                        sf[LOST],
                        cap,
                        g_off,
                        g_ptr,
                        g_link,
                        g_coef,
                        bsg,
                        bsw,
                        nb,
                        bpos,
                        mptr,
                        members,
                        rtol,
                    )
                    nf = m
                    ic[SOLVED] += m
                    for j in range(m):
                        fl[j] = act[j]
                        newr[act[j]] = rate[j]
                        rebottle(act[j], sb[j], bott, nbott)
                if bad:
                    fc[0] = t
                    return UNCONSTRAINED, si, sf, bins
                for j in range(ndl):
                    ldirty[dl[j]] = False
                ndl = ns = 0
                for j in range(nf):
                    f = fl[j]
                    if newr[f] != sf[RATE, f]:  # settle at the old rate, project the new
                        _set_rate(
                            f,
                            t,
                            newr[f],
                            si,
                            sf,
                            rbits,
                            rcls,
                            rclw,
                            bins,
                            bin_s,
                            done_rtol,
                            hk1,
                            hl1,
                            hp1,
                            hk2,
                            hl2,
                            hp2,
                            hsz,
                        )
            if hsz[0] > 0:
                t1 = hk1[0]
        # -- 3. next event
        t_other = ht[0] if ic[HSIZE] > 0 else np.inf
        if t1 < t_other and batch_rtol > 0 and not replaying:
            window = t1 + batch_rtol * (t1 - hk3[0])
            if done_list.size < hsz[0]:
                done_list = np.empty(S, np.int64)
            k = heap_le(hk1, hl1, hsz[0], window, done_list)
            top = -np.inf
            for j in range(k):
                top = max(top, sf[PROJ][done_list[j]])
            t1 = min(top, t_other)
        t_next = min(t1, t_other)
        if m == 0 and ic[HSIZE] == 0 and not virtual:
            fc[0] = t
            return DONE, si, sf, bins
        stop = t_next > until_s or t_next == np.inf
        if stop and not advance:
            fc[0] = t
            return UNTIL, si, sf, bins
        t_adv = min(until_s, t_next) if stop else t_next
        if t_adv == np.inf:
            t_adv = t
        # -- 4. advance (replays add the memo's loads; other flows settle lazily)
        dt = t_adv - t
        if dt > 0 and (m > 0 or virtual):
            bins = _ensure_bins(bins, bin_s, t_adv)
            if replaying:
                _replay_bins(bins, bin_s, rp_seg_t, rp_seg_b, ic, t, t_adv)
            elif virtual:
                _vbins(bins, bin_s, vm, vq, fc[1], ic, t, t_adv)
        t = t_adv
        if stop:
            if not replaying and not virtual:  # the driver may re-route: settle, re-solve
                for j in range(m):
                    f = act[j]
                    _settle(f, t, si, sf, rbits, rcls, rclw, bins, bin_s)
                    sf[RATE, f] = -1.0
            fc[0] = t
            return UNTIL, si, sf, bins
        ic[EVENTS] += 1
        # -- 5. completions
        if virtual and t >= _vend(vm, vq, fc):  # the set-level replay's last flow is done
            i = ic[VTASK]
            tbits[i] += vm.tbits[vq]
            arrive[i] = max(arrive[i], (fc[1] + vm.last_sent[vq]) + vm.last_hops[vq] * hop_s)
            left[i] = 0
            ic[FLOWS_DONE] += vm.n_flows[vq]
            vm.count[vq] += 1
            ic[HSIZE] = heap_push(ht, hs, hf, ic[HSIZE], arrive[i], ic[HSEQ], i + n)
            ic[HSEQ] += 1
            ic[RP] = 0
            continue
        if done_list.size < hsz[1]:
            done_list = np.empty(S, np.int64)
        k = heap_le(hk2, hl2, hsz[1], t, done_list)
        if k == 0:
            continue
        done_list[:k] = np.sort(done_list[:k])
        certified = certify and not local and not replaying
        if certified:  # split modes: a re-solve only if a flow left froze on a link they used
            certified = rates_stand(done_list, k, si[ROW], rsg, g_off, g_ptr, g_link, bott, nbott)
        for j in range(k):
            f = done_list[j]
            ndl = _link_remove(f, fg, lhead, lnext, lprev, ldirty, dl, ndl)
            hsz[0] = heap_remove(hk1, hl1, hp1, hsz[0], f)
            hsz[1] = heap_remove(hk2, hl2, hp2, hsz[1], f)
            if batch_rtol > 0:
                hsz[2] = heap_remove(hk3, hl3, hp3, hsz[2], f)
            if replaying:
                rbits[si[ROW, f]] += sf[RP_BITS, f]
                sent_t, deliv = sf[RP_SENT, f], sf[RP_DELIV, f]
                ic[RP_LEFT] -= 1
            else:
                thr = min(thr, sf[RATE, f])
                _settle(f, t, si, sf, rbits, rcls, rclw, bins, bin_s)
                sent_t, deliv = min(sf[PROJ, f], t), sf[DELIV, f]
            _complete(
                f, sent_t, deliv, hop_s, gap, si, sf, idle, left, arrive, tbits, ht, hs, hf, ic, n
            )
            last = act[m - 1]  # out of ``act`` in O(1): the last entry takes its place
            act[apos[f]] = last
            apos[last] = apos[f]
            apos[f] = -1
            m -= 1
        stale = stale or not certified
        ic[M] = m
        if replaying and ic[RP_LEFT] == 0:
            ic[RP] = 0


@numba.njit(cache=True)
def class_rows(group, weight, g_off, link_class, gptr, gc, gv, n_cls):
    """Per route row, its share on each link class: ``(cls[n, W], share[n, W])`` padded with
    -1 / 0. Single links (``group < g_off``) count once in their class; a spread group
    counts its coefficients per class (``gptr``/``gc``/``gv``: the groups' class CSR)."""
    n, K = group.shape
    per_group = 1
    for s in range(gptr.size - 1):
        per_group = max(per_group, gptr[s + 1] - gptr[s])
    wb = min(n_cls, K * per_group)
    cls = np.full((n, wb), -1, np.int64)
    val = np.zeros((n, wb))
    tmp = np.zeros(n_cls)
    touched = np.empty(n_cls, np.int64)
    width = 1
    for i in range(n):
        nt = 0
        for k in range(K):
            g = group[i, k]
            w = weight[i, k]
            if g < 0 or w <= 0.0:
                continue
            if g < g_off:
                c = link_class[g]
                if tmp[c] == 0.0:
                    touched[nt] = c
                    nt += 1
                tmp[c] += w
            else:
                s = g - g_off
                for e in range(gptr[s], gptr[s + 1]):
                    c = gc[e]
                    if tmp[c] == 0.0:
                        touched[nt] = c
                        nt += 1
                    tmp[c] += w * gv[e]
        for j in range(nt):
            c = touched[j]
            cls[i, j] = c
            val[i, j] = tmp[c]
            tmp[c] = 0.0
        width = max(width, nt)
    return cls[:, :width].copy(), val[:, :width].copy()


@numba.njit(cache=True)
def evolve(
    rows,
    wire,
    lost,
    rsg,
    rsw,
    rcls,
    rclw,
    n_cls,
    groups,
    batch_rtol,
    done_rtol,
    rtol,
    tau,
    local,
    certify,
):
    """The flows ``rows``/``wire`` (route rows, wire bits), all starting at offset 0 with
    nothing else in flight, run alone until they all sent their last bit (``tau = inf``) or
    until ``tau``: the same rate / next-event / advance / completion statements as
    :func:`run_loop` without the heap. Returns ``(event_t, sent_t, deliv, sent_bits, rem,
    seg_t, seg_bits[S, C], events, solves, bad)``: per flow the offset of the event that
    completed it and of its last bit, its delivered and sent wire bits and remaining bits
    (at ``tau``), and the piecewise-constant class loads (bits per segment). ``certify``:
    split routes are re-solved after completions only where
    :func:`~trainfabric.fabric.maxmin.rates_stand` cannot certify the rates."""
    cap, g_off, g_ptr, g_link = groups.capacity_bps, groups.offset, groups.ptr, groups.link
    g_coef = groups.coef
    m0 = rows.size
    K = rsg.shape[1]
    W = rcls.shape[1]
    n_groups = g_off + g_ptr.size - 1
    event_t = np.full(m0, np.inf)
    sent_t = np.full(m0, np.inf)
    deliv = np.zeros(m0)
    sent_bits = np.zeros(m0)
    rem = wire.copy()
    act = np.arange(m0)
    m = m0
    bsg = np.empty((max(m0, 1), K), np.int64)
    bsw = np.empty((max(m0, 1), K))
    bpos = np.full(m0, -1, np.int64)
    nb, mptr, members = rebuild_base(act, m, rows, rsg, rsw, lost, n_groups, bsg, bsw, bpos)
    seg_t = np.empty(64)
    seg_b = np.zeros((64, n_cls))
    ns = 0
    t = 0.0
    events = 0
    solves = 0
    srate = np.zeros(m0)
    comp = np.zeros(m0, np.int64)
    parent = np.zeros(m0, np.int64)
    dirty = np.zeros(m0, np.bool_)
    fl = np.empty(m0, np.int64)
    lmap = np.full(cap.size if local else 0, -1, np.int32)
    fwf, fwi = fill_scratch(cap.size)  # fill_local's scratch
    fz = np.zeros(lmap.size)  # no flow held: whole components are solved
    lhead = np.full(lmap.size, -1, np.int32)  # member lists (finished flows stay, skipped)
    lnext = np.full(m0 * K if local else 0, -1, np.int32)
    fstate = np.zeros(m0 if local else 0, np.int8)
    fg = np.full((m0 if local else 0, K), -1, np.int32)
    fw = np.zeros((fg.shape[0], K))
    bott = np.full(m0, -1, np.int64)  # per flow: the link it froze at in the last solve
    nbott = np.zeros(0 if local else cap.size, np.int32)  # split routes: count per link
    done = np.empty(m0, np.int64)
    need = True  # split routes: the rates must be solved
    if local:
        owner = np.full(cap.size, -1, np.int64)
        components(act, m, rows, rsg, rsw, parent, owner, comp)
        dirty[:] = True
        lprev = np.full(m0 * K, -1, np.int32)
        for f in range(m0):
            _link_insert(f, rows[f], rsg, rsw, fg, fw, lhead, lnext, lprev)
    while m > 0:
        solves += 1
        if local:  # only the components that lost a flow
            nf = 0
            for j in range(m):
                f = act[j]
                if dirty[comp[f]]:
                    fl[nf] = f
                    nf += 1
            for j in range(nf):
                dirty[comp[fl[j]]] = False
            bad = fill_local(
                fl,
                nf,
                fg,
                fw,
                lost,
                cap,
                lmap,
                rtol,
                srate,
                fz,
                lhead,
                lnext,
                fstate,
                bott,
                fwf,
                fwi,
            )
            rate = np.empty(m)
            for j in range(m):
                rate[j] = srate[act[j]]
        elif need:
            rate, bad, sb = solve_active(
                act,
                m,
                lost,
                cap,
                g_off,
                g_ptr,
                g_link,
                g_coef,
                bsg,
                bsw,
                nb,
                bpos,
                mptr,
                members,
                rtol,
            )
            for j in range(m):
                srate[act[j]] = rate[j]
                rebottle(act[j], sb[j], bott, nbott)
        else:  # certified: the rates stand
            solves -= 1
            bad = 0
            rate = np.empty(m)
            for j in range(m):
                rate[j] = srate[act[j]]
        if bad:
            return (
                event_t,
                sent_t,
                deliv,
                sent_bits,
                rem,
                seg_t[:ns],
                seg_b[:ns],
                events,
                solves,
                bad,
            )
        gp = np.empty(m)
        proj = np.empty(m)
        t1 = np.inf
        for j in range(m):
            f = act[j]
            gp[j] = rate[j] * (1.0 - lost[f])
            proj[j] = t + rem[f] / gp[j] if gp[j] > 0 else np.inf
            t1 = min(t1, proj[j])
        if t1 < np.inf and batch_rtol > 0:
            window = t1 + batch_rtol * (t1 - 0.0)
            top = -np.inf
            for j in range(m):
                if proj[j] <= window and proj[j] > top:
                    top = proj[j]
            t1 = top
        stop = t1 > tau or t1 == np.inf
        t_adv = min(tau, t1)
        if t_adv == np.inf:
            break  # stalled forever: the caller sees sent_t = inf
        dt = t_adv - t
        if dt > 0:
            if ns == seg_t.size:
                seg_t = np.concatenate((seg_t, np.empty(ns)))
                seg_b = _grow2f(seg_b, 2 * ns)
            seg_t[ns] = t
            for j in range(m):
                f = act[j]
                busy = min(proj[j] - t, dt)
                rem[f] -= gp[j] * busy
                deliv[f] += gp[j] * busy
                sent = rate[j] * busy
                sent_bits[f] += sent
                r = rows[f]
                for w in range(W):
                    c = rcls[r, w]
                    if c < 0:
                        break
                    seg_b[ns, c] += sent * rclw[r, w]
            ns += 1
        t = t_adv
        if stop:
            break
        events += 1
        keep = nd = 0
        for j in range(m):
            f = act[j]
            if proj[j] <= t or (gp[j] > 0 and rem[f] <= done_rtol * wire[f]):
                event_t[f] = t
                dirty[comp[f]] = True
                sent_t[f] = min(proj[j], t)
                rem[f] = 0.0
                done[nd] = f
                nd += 1
            else:
                act[keep] = f
                keep += 1
        m = keep
        if not local:
            need = not (certify and rates_stand(done, nd, rows, rsg, g_off, g_ptr, g_link,
                                               bott, nbott))  # fmt: skip
    out_t = np.empty(ns + 1)
    out_t[:ns] = seg_t[:ns]
    out_t[ns] = t
    return event_t, sent_t, deliv, sent_bits, rem, out_t, seg_b[:ns].copy(), events, solves, 0


@numba.njit(cache=True)
def _grow2f(a, rows):
    out = np.zeros((rows, a.shape[1]))
    out[: a.shape[0]] = a
    return out


# -- max-min on a subset of flows whose slots are all single links ---------------------------------
@numba.njit(cache=True)
def _find(parent, i):
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@numba.njit(cache=True)
def components(act, m, row, rsg, rsw, parent, owner, comp):
    """Connected components of the flows ``act[:m]`` (slots) linked by shared links
    (union-find); ``comp[f]`` = the component's root slot. ``owner`` is a per-link scratch
    array of -1, restored before returning."""
    K = rsg.shape[1]
    for j in range(m):
        f = act[j]
        parent[f] = f
    for j in range(m):
        f = act[j]
        r = row[f]
        for k in range(K):
            g = rsg[r, k]
            if g < 0 or rsw[r, k] <= 0.0:
                continue
            o = owner[g]
            if o < 0:
                owner[g] = f
            else:
                a, b = _find(parent, f), _find(parent, o)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    for j in range(m):
        f = act[j]
        r = row[f]
        comp[f] = _find(parent, f)
        for k in range(K):
            g = rsg[r, k]
            if g >= 0:
                owner[g] = -1
