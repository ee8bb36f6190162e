"""The flow engine's event loop compiled with numba, for fabrics whose routes are static.

When no link changes state during the run (no :class:`~trainfabric.fabric.flow.engine.LinkEvents`)
and the mode does not re-hash on idle gaps (not ``flowlet``), the router is in one epoch for
the whole run: every flow's route is a function of the flow alone, so all routes are
computed once before the loop (in chunks, by the same :class:`~trainfabric.fabric.routing.Router`
calls as the Python loop makes at each release) and the whole event loop runs in one
compiled call. It is the Python loop of :mod:`trainfabric.fabric.flow.engine` statement for
statement — same next-event rule, same completion test, same release rule, same batched
completions — with three changes of bookkeeping, none of the model:

* the max-min solve (:func:`trainfabric.fabric.maxmin.progressive_fill`, the same progressive
  filling) runs on a compact copy of the active flows' slots and its group -> flow
  incidence, rebuilt after releases and reused while flows only complete (as the Python
  loop reuses its incidence); when every route slot is a single link (the single-path
  modes), on per-link member lists of the active flows instead
  (:func:`~trainfabric.fabric.maxmin.fill_local`), touching only the links they use;
* link bits are integrated per flow (``Σ rate_f · busy_f``, the wire bits it sent) and put on
  the links once at the end (``A^T s``) instead of adding the link loads at every event: the
  same sum in another order;
* releases live in a binary heap of ``(time, sequence, flow)`` (the Python loop keeps groups
  of flows per time); equal-time releases start at the same event either way.

Results agree with the Python loop to rounding (tests compare finish times to ``1e-9``
relative on random instances). Per event the cost is ``O(active · slots + links + groups)``
with no Python in it; the Python loop's cost per event is dominated by about forty numpy
calls of a few microseconds each.
"""

from __future__ import annotations

import numba
import numpy as np

from trainfabric.fabric.heap import heap_pop, heap_push
from trainfabric.fabric.maxmin import fill_local, fill_scratch, rebottle, rebuild_base, solve_active

ROUTE_CHUNK = 1 << 20  # flows routed per Router.route call before the loop


# -- release heap: (time, seq) ordered, flow payload ------------------------------------------


# -- the loop -----------------------------------------------------------------------------------
@numba.njit(cache=True)
def _grow2(a, rows):
    out = np.zeros((rows, a.shape[1]), a.dtype)
    out[: a.shape[0]] = a
    return out


@numba.njit(cache=True)
def _complete(f, sent, finish, rem, hops, hop_s, succ_ptr, succ, ready, pending, rel, dly, heap):
    """Flow ``f`` sent its last byte at ``sent``: it finishes on arrival; successors whose
    last predecessor this was are pushed at ``max(ready, release) + delay``."""
    ht, hs, hf, state = heap
    arrive = sent + hops[f] * hop_s
    finish[f] = arrive
    rem[f] = 0.0
    for e in range(succ_ptr[f], succ_ptr[f + 1]):
        s = succ[e]
        if arrive > ready[s]:
            ready[s] = arrive
        pending[s] -= 1
        if pending[s] == 0:
            at = max(ready[s], rel[s]) + dly[s]
            state[0] = heap_push(ht, hs, hf, state[0], at, state[1], s)
            state[1] += 1


@numba.njit(cache=True)
def _single_links(sg, g_off) -> bool:
    """Every route slot is one link (single-path modes), not a spread group."""
    for r in range(sg.shape[0]):
        for k in range(sg.shape[1]):
            if sg[r, k] >= g_off:
                return False
    return True


@numba.njit(cache=True)
def _flow_links(rid, sg, sw, n):
    """Per flow (the first ``n``; 0: none) the links of its route with weight, then -1."""
    K = sg.shape[1]
    fg = np.full((n, K), -1, np.int32)
    fw = np.zeros((n, K))
    for f in range(n):
        j = 0
        for k in range(K):
            g, w = sg[rid[f], k], sw[rid[f], k]
            if g >= 0 and w > 0.0:
                fg[f, j], fw[f, j] = g, w
                j += 1
    return fg, fw


@numba.njit(cache=True, _nrt=False)
def _solve_links(act, m, fg, fw, lost, cap, lmap, rtol, rate, fz, lhead, lnext, state, bott,
                 wf, wi, load, nbott):  # fmt: skip
    """Max-min rates (``rate[f]``) and bottlenecks (``bott[f]``) of the flows ``act[:m]``
    whose slots are single links: their member lists built,
    :func:`~trainfabric.fabric.maxmin.fill_local` on the links they use (no allocation,
    nothing proportional to the fabric's size), the lists cleared, and every link's ``load``
    (bits/s) and count of flows bottlenecked there (``nbott``) recomputed; the count of
    unconstrained flows."""
    K = fg.shape[1]
    for i in range(m):
        f = act[i]
        for k in range(K):
            g = fg[f, k]
            if g < 0:
                break
            lnext[f * K + k] = lhead[g]
            lhead[g] = f * K + k
            load[g] = 0.0
            nbott[g] = 0
    bad = fill_local(act, m, fg, fw, lost, cap, lmap, rtol, rate, fz, lhead, lnext, state,
                     bott, wf, wi)  # fmt: skip
    for i in range(m):
        f = act[i]
        for k in range(K):
            g = fg[f, k]
            if g < 0:
                break
            lhead[g] = -1
            load[g] += fw[f, k] * rate[f]
        if bott[f] >= 0:
            nbott[bott[f]] += 1
    return bad


@numba.njit(cache=True, _nrt=False)
def _account(act, m, fg, fw, rate, sb, frate, bott, load, nbott):
    """After a solve of the active flows by the group solver (``rate``, bottlenecks ``sb``,
    in ``act`` order): each flow's rate and bottleneck, the links' loads and counts of
    flows bottlenecked there, updated where they changed (``O(m)`` plus the changed flows'
    slots)."""
    for i in range(m):
        f = act[i]
        d = rate[i] - frate[f]
        if d != 0.0:
            frate[f] = rate[i]
            for k in range(fg.shape[1]):
                g = fg[f, k]
                if g < 0:
                    break
                load[g] += fw[f, k] * d
        if sb[i] != bott[f]:
            rebottle(f, sb[i], bott, nbott)


@numba.njit(cache=True, _nrt=False)
def _leave(f, fg, fw, lost, rate, bott, cnt, load, nbott) -> bool:
    """Flow ``f`` completes: counted out of its links. ``True`` when every other flow keeps
    its rate (no flow froze at one of its links: the bottleneck test of
    :func:`~trainfabric.fabric.maxmin.rates_stand`)."""
    if lost[f] >= 1.0:
        return True
    rebottle(f, -1, bott, nbott)
    stand = True
    for k in range(fg.shape[1]):
        g = fg[f, k]
        if g < 0:
            break
        cnt[g] -= 1
        load[g] = load[g] - fw[f, k] * rate[f] if cnt[g] > 0 else 0.0
        stand = stand and nbott[g] == 0
    return stand


@numba.njit(cache=True, _nrt=False)
def _join(f, valid, fg, fw, lost, cap, rate, bott, cnt, load, nbott) -> bool:
    """Flow ``f`` is released: counted on its links, and given its max-min rate at once when
    that is certain (returns whether the allocation is still the max-min one). Certain when
    the allocation was (``valid``) and ``f``'s smallest residual share ``x = (c_l -
    load_l) / w_l`` is positive and taken at a link no other flow uses: the links it crosses
    all had room, so none was saturated and no flow's bottleneck changes; ``f`` saturates
    that link alone, so it has a bottleneck too, and an allocation in which every flow has
    one is the max-min fair one (:func:`~trainfabric.fabric.maxmin.progressive_fill`)."""
    rate[f] = 0.0
    if lost[f] >= 1.0:
        return valid
    K = fg.shape[1]
    x, at, free = np.inf, -1, False
    for k in range(K):
        g = fg[f, k]
        if g < 0:
            break
        share = (cap[g] - load[g]) / fw[f, k]
        if share < x or (share == x and cnt[g] == 0 and not free):
            x, at, free = share, g, cnt[g] == 0
    for k in range(K):
        g = fg[f, k]
        if g < 0:
            break
        cnt[g] += 1
    if not (valid and free and 0.0 < x < np.inf):
        return False
    rate[f] = x
    for k in range(K):
        g = fg[f, k]
        if g < 0:
            break
        load[g] += fw[f, k] * x
    rebottle(f, at, bott, nbott)
    return True


@numba.njit(cache=True)
def event_loop(
    wire,
    rem,
    start,
    finish,
    pending,
    ready,
    rel,
    dly,
    succ_ptr,
    succ,
    job,
    n_jobs,
    rid,
    sg,
    sw,
    lost,
    hops,
    hop_s,
    cap,
    g_off,
    g_ptr,
    g_link,
    g_coef,
    until_s,
    batch_rtol,
    done_rtol,
    rtol,
):
    """Run the flows to completion (or ``until_s``); module doc. Flow ``f`` follows route
    ``rid[f]`` (rows of ``sg``/``sw``), with ``lost[f]`` and ``hops[f]``. Fills ``rem``,
    ``start``, ``finish`` in place. Returns ``(t_end, events, solves, sent_bits per flow, seg_t,
    seg_goodput[S, J], seg_active[S, J], seg_impaired[S, J], unconstrained)``."""
    n = wire.size
    K = sg.shape[1]
    n_groups = g_off + g_ptr.size - 1
    ht = np.empty(n)
    hs = np.empty(n, np.int64)
    hf = np.empty(n, np.int64)
    state = np.zeros(2, np.int64)  # heap size, next sequence number
    heap = (ht, hs, hf, state)
    for f in range(n):
        if pending[f] == 0:
            state[0] = heap_push(ht, hs, hf, state[0], rel[f] + dly[f], state[1], f)
            state[1] += 1
    act = np.empty(n, np.int64)
    m = 0
    sent_bits = np.zeros(n)
    bsg = np.empty((16, K), np.int64)
    bsw = np.empty((16, K))
    bpos = np.full(n, -1, np.int64)
    nb = 0
    mptr = np.zeros(1, np.int64)
    members = np.zeros(0, np.int64)
    released = True  # flows joined since the base was built
    fresh = True  # flows joined since the last solve
    local = _single_links(sg, g_off)
    fg, fw = _flow_links(rid, sg, sw, n if local else 0)
    lhead = np.full(cap.size, -1, np.int32)  # per link: its flows (fill_local's lists)
    lnext = np.full(fg.size, -1, np.int32)
    lmap = np.full(cap.size, -1, np.int32)
    fz = np.zeros(cap.size)
    frate = np.zeros(fg.shape[0])
    fstate = np.zeros(fg.shape[0], np.int8)
    fbott = np.full(fg.shape[0], -1, np.int64)
    wf, wi = fill_scratch(cap.size)
    # single links: the active flows' count, load (bits/s) and bottlenecks per link, and
    # whether ``frate`` is the max-min allocation of the active flows (module doc)
    cnt = np.zeros(cap.size if local else 0, np.int32)
    load = np.zeros(cnt.size)
    nbott = np.zeros(cnt.size, np.int32)
    valid = False
    seg_t = np.empty(64)
    seg_g = np.zeros((64, n_jobs))
    seg_a = np.zeros((64, n_jobs), np.int64)
    seg_i = np.zeros((64, n_jobs), np.int64)
    n_seg = 0
    t = 0.0
    events = 0
    solves = 0
    while True:
        # -- rates of the active flows
        rate = np.zeros(m)
        if m > 0 and not (local and valid):
            solves += 1
            if local and fresh:  # flows released since the last solve: no base to rebuild
                bad = _solve_links(act, m, fg, fw, lost, cap, lmap, rtol, frate, fz, lhead,
                                   lnext, fstate, fbott, wf, wi, load, nbott)  # fmt: skip
            else:
                if released:
                    if bsg.shape[0] < m:
                        bsg = np.empty((2 * m, K), np.int64)
                        bsw = np.empty((2 * m, K))
                    nb, mptr, members = rebuild_base(
                        act, m, rid, sg, sw, lost, n_groups, bsg, bsw, bpos
                    )
                    released = False
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
                if local:
                    _account(act, m, fg, fw, rate, sb, frate, fbott, load, nbott)
            if bad:
                return t, events, solves, sent_bits, seg_t[:n_seg], seg_g, seg_a, seg_i, bad
            fresh, valid = False, local
        if local:
            for i in range(m):
                rate[i] = frate[act[i]]
        gp = np.empty(m)
        proj = np.empty(m)
        t1 = np.inf
        for i in range(m):
            f = act[i]
            gp[i] = rate[i] * (1.0 - lost[f])
            proj[i] = t + rem[f] / gp[i] if gp[i] > 0 else np.inf
            t1 = min(t1, proj[i])
        # -- next event
        if m == 0 and state[0] == 0:
            t_next = np.inf
        else:
            t_other = ht[0] if state[0] > 0 else np.inf
            if t1 < t_other and batch_rtol > 0:
                t0 = np.inf
                for i in range(m):
                    t0 = min(t0, start[act[i]])
                window = t1 + batch_rtol * (t1 - t0)
                top = -np.inf
                for i in range(m):
                    if proj[i] <= window and proj[i] > top:
                        top = proj[i]
                t1 = min(top, t_other)
            t_next = min(t1, t_other)
        stop = t_next == np.inf or t_next > until_s
        t_adv = (min(until_s, t) if t_next == np.inf else until_s) if stop else t_next
        # -- advance to t_adv
        dt = t_adv - t
        if dt > 0:
            if n_seg == seg_t.size:
                seg_t = np.concatenate((seg_t, np.empty(n_seg)))
                seg_g, seg_a, seg_i = (
                    _grow2(seg_g, 2 * n_seg),
                    _grow2(seg_a, 2 * n_seg),
                    _grow2(seg_i, 2 * n_seg),
                )
            seg_t[n_seg] = t
            for i in range(m):
                f = act[i]
                busy = min(proj[i] - t, dt)
                rem[f] -= gp[i] * busy
                sent_bits[f] += rate[i] * busy
                j = job[f]
                seg_g[n_seg, j] += gp[i] * (busy / dt)
                seg_a[n_seg, j] += 1
                if lost[f] > 0:
                    seg_i[n_seg, j] += 1
            n_seg += 1
        t = t_adv
        if stop:
            break
        events += 1
        # -- completions, then releases due by t
        keep = 0
        for i in range(m):
            f = act[i]
            if proj[i] <= t or (gp[i] > 0 and rem[f] <= done_rtol * wire[f]):
                sent = min(proj[i], t)
                _complete(
                    f,
                    sent,
                    finish,
                    rem,
                    hops,
                    hop_s,
                    succ_ptr,
                    succ,
                    ready,
                    pending,
                    rel,
                    dly,
                    heap,
                )
                if local:
                    valid = _leave(f, fg, fw, lost, frate, fbott, cnt, load, nbott) and valid
            else:
                act[keep] = f
                keep += 1
        m = keep
        while state[0] > 0 and ht[0] <= t:
            f, state[0] = heap_pop(ht, hs, hf, state[0])
            start[f] = t
            act[m] = f
            m += 1
            released = fresh = True
            if local:
                valid = _join(f, valid, fg, fw, lost, cap, frate, fbott, cnt, load, nbott)
    return t, events, solves, sent_bits, seg_t[:n_seg], seg_g, seg_a, seg_i, 0


def route_keys(router, flows) -> tuple[np.ndarray, np.ndarray]:
    """``(first, rid)``: flows ``first[r]`` represent the distinct routes, flow ``f`` follows
    route ``rid[f]``. A route is a function of ``(src, dst)`` under the split modes and of
    ``(src, dst, entropy, channel)`` under the single-path ones (in one epoch, without
    flowlet re-hashes): flows of one connection (same entropy) share a route, checked."""
    n = flows.n
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if router.split:
        key = flows.src * np.int64(max(int(flows.dst.max()) + 1, 1)) + flows.dst
        _, first, rid = np.unique(key, return_index=True, return_inverse=True)
        return first, rid.astype(np.int64)
    order = np.argsort(flows.entropy, kind="stable")
    e = flows.entropy[order]
    new = np.r_[True, e[1:] != e[:-1]]
    same_conn = True
    for col in (flows.src, flows.dst, flows.channel):
        c = col[order]
        same_conn &= bool(np.all(new[1:] | (c[1:] == c[:-1])))
    if not same_conn:  # an entropy shared by different endpoints: key on every input
        cols = np.stack([flows.src, flows.dst, flows.channel, flows.entropy.view(np.int64)], 1)
        _, first, rid = np.unique(cols, axis=0, return_index=True, return_inverse=True)
        return first, rid.ravel().astype(np.int64)
    group = np.cumsum(new) - 1
    rid = np.empty(n, np.int64)
    rid[order] = group
    first = order[new]
    return first, rid


def route_all(router, flows, chunk: int = ROUTE_CHUNK):
    """The distinct routes (:func:`route_keys`) in the router's current epoch, ``chunk``
    per call: ``(rid[n], group[R, K], weight[R, K], lost[n], hops[n])``."""
    first, rid = route_keys(router, flows)
    R = first.size
    sg = sw = None
    lost = np.ones(R)
    hops = np.zeros(R, np.int64)
    for lo in range(0, R, chunk):
        sel = np.arange(lo, min(R, lo + chunk))
        r = router.route(flows, first[sel])
        if sg is None:
            sg = np.full((R, r.group.shape[1]), -1, np.int64)
            sw = np.zeros((R, r.group.shape[1]))
        sg[sel] = r.group
        sw[sel] = r.weight
        lost[sel] = r.lost
        hops[sel] = r.hops
    if sg is None:
        sg, sw = np.full((0, 1), -1, np.int64), np.zeros((0, 1))
    return rid, sg, sw, lost[rid], hops[rid]
