"""The DAG-driven engine's event loop, compiled with numba (:mod:`~trainfabric.fabric.tasks`).

One call runs the loop from the state's time until the graph is done, ``until_s``, or a comm
task needs routes that the current routing epoch has not computed yet (then it returns with
the connections to route and resumes where it stopped when called again). Per iteration:

1. every heap event due at ``t`` (task starts, task finishes) in ``(time, sequence)`` order:
   a timer pushes its finish at ``t + duration``; a comm task creates its flows (zero-byte
   flows arrive at once, after their path's propagation latency); a finish counts down its
   successors and pushes the start of each one it releases at ``release + latency``;
2. max-min rates of the flows in flight (:func:`trainfabric.fabric.engine_loop._solve`, the
   engine's progressive filling on the compact base, rebuilt only after flows joined);
3. the next event: the earliest projected completion (batched as the flow engine does when
   ``batch_rtol > 0``), the heap's top, or ``until_s``;
4. advance: remaining wire bits fall by goodput x busy time, delivered bits, bits per route
   (for link loads) and per link class and time bin are integrated;
5. completions: a flow whose last wire bit left at ``sent`` arrives ``hops x hop_s`` later;
   the last arrival of a comm task is its finish, pushed on the heap.

The same statements as :mod:`trainfabric.fabric.engine_loop` for the flow part, so a flow
table written as a task graph gives the same finish times (tested to 1e-9).
"""

from __future__ import annotations

import numba
import numpy as np

from trainfabric.fabric.engine_loop import _heap_pop, _heap_push, _rebuild, _solve

COMM = 1
DONE, UNTIL, NEED_ROUTES, UNCONSTRAINED = 0, 1, 2, 3
# integer counters in ``ic``
M, NFREE, HSIZE, HSEQ, EVENTS, SOLVES, PEAK, NEED, FLOWS_DONE = range(9)
N_COUNTERS = 9


@numba.njit(cache=True)
def _grown(a, size, fill):
    out = np.full(size, fill, a.dtype)
    out[: a.size] = a
    return out


@numba.njit(cache=True)
def _grow_slots(sl, k):
    """Slot arrays with room for at least ``k`` more free slots (capacity doubles)."""
    s_row, s_task, s_conn, s_rem, s_wire, s_start = sl[:6]
    s_deliv, s_lost, s_hops, s_flowlet, act, free = sl[6:]
    S2 = max(2 * s_row.size, s_row.size + k, 16)
    new = (
        _grown(s_row, S2, -1),
        _grown(s_task, S2, -1),
        _grown(s_conn, S2, -1),
        _grown(s_rem, S2, 0.0),
        _grown(s_wire, S2, 0.0),
        _grown(s_start, S2, 0.0),
        _grown(s_deliv, S2, 0.0),
        _grown(s_lost, S2, 0.0),
        _grown(s_hops, S2, 0),
        _grown(s_flowlet, S2, 0),
        _grown(act, S2, -1),
        _grown(free, S2, -1),
    )
    return new, S2


@numba.njit(cache=True)
def _bin_add(bins, bin_s, c, a, b, bits):
    """Spread ``bits`` evenly over ``[a, b]`` into the time bins of class ``c``."""
    if bits == 0.0 or b <= a:
        return
    k0 = int(a // bin_s)
    k1 = min(int(b // bin_s), bins.shape[0] - 1)
    if k0 >= k1:
        bins[min(k0, bins.shape[0] - 1), c] += bits
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


@numba.njit(cache=True)
def _finish_task(i, tf, n, succ_ptr, succ, pending, ready, rel_by, lat, tfinish, heap, ic):
    """Task ``i`` finished at ``tf``: count down its successors (module doc)."""
    ht, hs, hf = heap
    tfinish[i] = tf
    for e in range(succ_ptr[i], succ_ptr[i + 1]):
        s = succ[e]
        if tf > ready[s] or (tf == ready[s] and (rel_by[s] < 0 or i < rel_by[s])):
            ready[s] = tf
            rel_by[s] = i
        pending[s] -= 1
        if pending[s] == 0:
            ic[HSIZE] = _heap_push(ht, hs, hf, ic[HSIZE], ready[s] + lat[s], ic[HSEQ], s)
            ic[HSEQ] += 1


@numba.njit(cache=True)
def run_loop(
    graph,
    tstate,
    heap,
    conn,
    routes,
    sl,
    bins,
    ic,
    fc,
    need,
    groups,
    params,
):
    """Run until done / ``until_s`` / routes needed (module doc). Returns
    ``(status, slots, bins)``: the slot arrays and bins may have been reallocated."""
    kind, dur, lat, succ_ptr, succ, flow_set, set_ptr, flow_conn, flow_wire = graph
    pending, ready, rel_by, tstart, tfinish, left, arrive, tbits = tstate
    ht, hs, hf = heap
    conn_row, idle, flowlet = conn
    rsg, rsw, rlost, rhops, rcls, rclw, rbits = routes
    cap, g_off, g_ptr, g_link, g_coef = groups
    hop_s, until_s, advance, batch_rtol, done_rtol, rtol, gap, bin_s = params
    n = kind.size
    K = rsg.shape[1]
    W = rcls.shape[1]
    C = bins.shape[1]
    n_groups = g_off + g_ptr.size - 1
    s_row, s_task, s_conn, s_rem, s_wire, s_start = sl[:6]
    s_deliv, s_lost, s_hops, s_flowlet, act, free = sl[6:]
    S = s_row.size
    bsg = np.empty((max(16, ic[M]), K), np.int64)
    bsw = np.empty((max(16, ic[M]), K))
    bpos = np.full(S, -1, np.int64)
    nb = 0
    mptr = np.zeros(1, np.int64)
    members = np.zeros(0, np.int64)
    released = True
    seg_c = np.zeros(C)
    t = fc[0]
    while True:
        # -- 1. heap events due at t
        while ic[HSIZE] > 0 and ht[0] <= t:
            e = hf[0]
            if e >= n:  # a finish
                tf = ht[0]
                _, ic[HSIZE] = _heap_pop(ht, hs, hf, ic[HSIZE])
                _finish_task(
                    e - n, tf, n, succ_ptr, succ, pending, ready, rel_by, lat, tfinish, heap, ic
                )
                continue
            i = e
            if kind[i] == COMM:
                lo, hi = set_ptr[flow_set[i]], set_ptr[flow_set[i] + 1]
                if ic[NFREE] < hi - lo:
                    S_old = S
                    sl, S = _grow_slots(sl, hi - lo)
                    s_row, s_task, s_conn, s_rem, s_wire, s_start = sl[:6]
                    s_deliv, s_lost, s_hops, s_flowlet, act, free = sl[6:]
                    for q in range(S_old, S):
                        free[ic[NFREE]] = q
                        ic[NFREE] += 1
                    bpos = np.full(S, -1, np.int64)
                    released = True
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
                    ic[NEED] = n_need
                    fc[0] = t
                    return NEED_ROUTES, sl, bins
            _, ic[HSIZE] = _heap_pop(ht, hs, hf, ic[HSIZE])
            tstart[i] = t
            if kind[i] != COMM:
                ic[HSIZE] = _heap_push(ht, hs, hf, ic[HSIZE], t + dur[i], ic[HSEQ], i + n)
                ic[HSEQ] += 1
                continue
            left[i] = hi - lo
            arrive[i] = t
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
                f = free[ic[NFREE]]
                s_row[f] = r
                s_task[f] = i
                s_conn[f] = c
                s_rem[f] = flow_wire[q]
                s_wire[f] = flow_wire[q]
                s_start[f] = t
                s_deliv[f] = 0.0
                s_lost[f] = rlost[r]
                s_hops[f] = rhops[r]
                s_flowlet[f] = flowlet[c]
                act[ic[M]] = f
                ic[M] += 1
                released = True
            ic[PEAK] = max(ic[PEAK], ic[M])
            if left[i] == 0:
                ic[HSIZE] = _heap_push(ht, hs, hf, ic[HSIZE], arrive[i], ic[HSEQ], i + n)
                ic[HSEQ] += 1
        m = ic[M]
        # -- 2. rates
        rate = np.zeros(m)
        if m > 0:
            ic[SOLVES] += 1
            if released:
                if bsg.shape[0] < m:
                    bsg = np.empty((2 * m, K), np.int64)
                    bsw = np.empty((2 * m, K))
                nb, mptr, members = _rebuild(
                    act, m, s_row, rsg, rsw, s_lost, n_groups, bsg, bsw, bpos
                )
                released = False
            rate, bad = _solve(
                act,
                m,
                s_lost,
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
            if bad:
                fc[0] = t
                return UNCONSTRAINED, sl, bins
        gp = np.empty(m)
        proj = np.empty(m)
        t1 = np.inf
        for j in range(m):
            f = act[j]
            gp[j] = rate[j] * (1.0 - s_lost[f])
            proj[j] = t + s_rem[f] / gp[j] if gp[j] > 0 else np.inf
            t1 = min(t1, proj[j])
        # -- 3. next event
        t_other = ht[0] if ic[HSIZE] > 0 else np.inf
        if t1 < t_other and batch_rtol > 0:
            t0 = np.inf
            for j in range(m):
                t0 = min(t0, s_start[act[j]])
            window = t1 + batch_rtol * (t1 - t0)
            top = -np.inf
            for j in range(m):
                if proj[j] <= window and proj[j] > top:
                    top = proj[j]
            t1 = min(top, t_other)
        t_next = min(t1, t_other)
        if m == 0 and ic[HSIZE] == 0:
            fc[0] = t
            return DONE, sl, bins
        stop = t_next > until_s or t_next == np.inf
        if stop and not advance:
            fc[0] = t
            return UNTIL, sl, bins
        t_adv = min(until_s, t_next) if stop else t_next
        if t_adv == np.inf:
            t_adv = t
        # -- 4. advance
        dt = t_adv - t
        if dt > 0 and m > 0:
            bins = _ensure_bins(bins, bin_s, t_adv)
            seg_c[:] = 0.0
            for j in range(m):
                f = act[j]
                busy = min(proj[j] - t, dt)
                s_rem[f] -= gp[j] * busy
                s_deliv[f] += gp[j] * busy
                r = s_row[f]
                sent = rate[j] * busy
                rbits[r] += sent
                for w in range(W):
                    c = rcls[r, w]
                    if c < 0:
                        break
                    if busy == dt:
                        seg_c[c] += sent * rclw[r, w]
                    else:
                        _bin_add(bins, bin_s, c, t, t + busy, sent * rclw[r, w])
            for c in range(C):
                _bin_add(bins, bin_s, c, t, t_adv, seg_c[c])
        t = t_adv
        if stop:
            fc[0] = t
            return UNTIL, sl, bins
        ic[EVENTS] += 1
        # -- 5. completions
        keep = 0
        for j in range(m):
            f = act[j]
            if proj[j] <= t or (gp[j] > 0 and s_rem[f] <= done_rtol * s_wire[f]):
                sent_t = min(proj[j], t)
                i = s_task[f]
                arrive[i] = max(arrive[i], sent_t + s_hops[f] * hop_s)
                tbits[i] += s_deliv[f]
                s_rem[f] = 0.0
                left[i] -= 1
                ic[FLOWS_DONE] += 1
                if gap >= 0.0:
                    idle[s_conn[f]] = sent_t
                if left[i] == 0:
                    ic[HSIZE] = _heap_push(ht, hs, hf, ic[HSIZE], arrive[i], ic[HSEQ], i + n)
                    ic[HSEQ] += 1
                s_task[f] = -1
                free[ic[NFREE]] = f
                ic[NFREE] += 1
            else:
                act[keep] = f
                keep += 1
        ic[M] = keep


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
