"""The fleet simulator's window loop compiled (numba): every run advanced window by window in
one kernel call, instead of one Python iteration per window over all runs.

It computes what :func:`~.fleet.simulate`'s Python loop computes (its reference, kept for
sync durations drawn from a distribution and for policies of other classes), with the same
floating-point operations in the same order, so the two agree to the bit
(``tests/diloco/test_fleet_kernel.py``). Per run and window ``w`` (``t0 = w·window_s``):

1. unless a sync is in flight (``sync_until > t0``), the run's policy decides from the same
   observation (:mod:`~.policies`; encoded by :func:`encode_policies`: a kind and its
   parameters per run, and for ``random_deferral`` and ``matched_random`` a precomputed
   decision row per window — the random deferral's uniforms are drawn from the same
   generators in the same order, ``learners`` per window);
2. a sync realises ``gain = tokens·e(h)·outer`` and occupies ``[t0, t0 + D)``;
3. the serving engines run to ``t0 + window_s`` (:func:`~.serving.advance_run`, the same
   engine code as the reference); in seed_compat mode the artifact's sidecar latencies
   instead;
4. the learners advance and the serving EWMA is updated.

The ``inference`` pressure a decision reads is computed from the last window's counters, as
:func:`~.fleet.server_pressure` does (histogram counts are whole numbers, so their sums are
exact in any order), only when the decision reads it (``adaptive_load``,
``pressure_gate`` and ``wa_*`` between their guards).

**The loss is not computed here.** ``wa_*`` policies read ``loss_delta = L(eff) −
L(eff + gain)`` (:meth:`~.learners.ProgressModel.loss`), and numpy's vectorised ``power``
(SIMD) differs from the C library's ``pow`` that compiled code calls in the last bit of
about 5% of values. So a run that needs ``loss_delta`` and has none buffered stops; the
driver (:func:`~.fleet.simulate`) projects its next :data:`LOSS_WINDOWS` windows as if it
did not sync (:func:`project`: the same progress arithmetic), evaluates the loss with numpy
on them, and resumes it. A sync discards the projection. A run therefore stops about once
per sync, and only ``wa_*`` runs do.

**Runs of one seed share its engines between syncs.** A run's engines differ from its seed's
no-sync trajectory only through the interference of its own syncs. When, after a window,
the run's sync is over and both its engines and the trajectory's are idle at the window's
end (:func:`_idle`: then the state is a function of the time and the request set alone), the
run's engines are the trajectory's from then on until its next sync: it takes the
trajectory's windows (its outcome counters, and the pressure its next decision reads) from
:func:`record`, run once per seed, instead of running them again. When it next syncs, its
engines restart from the trajectory's last idle state (:func:`_resume_engines`). In the
protocol a run's engines run for a few windows around each sync, and the 80 runs of a seed
(8 policies x 10 envelope draws) share the rest.

The kernels allocate nothing and run without reference counting (``_nrt=False``, as the
engine's, :mod:`~.serving`); :func:`~.fleet.simulate` runs blocks of runs on
``numba.get_num_threads()`` threads (``nogil``), each run on one thread, so the thread count
does not change a result.
"""

from __future__ import annotations

import numba
import numpy as np

from trainfabric.diloco.policies import (
    AdaptiveLoad,
    AdaptiveTokens,
    FixedH,
    PressureGate,
    RandomDeferral,
    Schedule,
    WADiLoCo,
)
from trainfabric.diloco.serving import (
    FINISHED,
    ITL_HIST,
    KV_FRAC,
    TTFT_HIST,
    VIOLATED,
    WAITING,
    advance_run,
)
from trainfabric.diloco.telemetry import ITL_BUCKETS, TTFT_BUCKETS

# policy kinds, and the columns of a run's parameter row
FIXED_H, TOKENS, LOAD, GATE, RANDOM, SCHEDULE, WA = range(7)
MIN_H, MAX_H, LIMIT, THRESHOLD, W_NET, W_INF, W_CKPT, W_SERVE, STALE, SERVE_SCALE = range(10)
LOSS_SCALE, TOKENS_NORM, SIGNAL, N_PARAMS = 10, 11, 12, 13
SIGNALS = {"now": 0.0, "forecast": 1.0, "next": 2.0}
# scalars of a simulation (``sc``)
DT, SYNC_S, OUTER, STEPS_PER_S, TOKENS_PER_STEP, DRIFT, ALPHA, KEEP = range(8)
TTFT_KEEP, ITL_KEEP, TAIL, QUEUE_SCALE, SLO_MS, N_SCALARS = 8, 9, 10, 11, 12, 13
# the columns of a run's ``state``
H, TOKENS_, EFF, SYNC_UNTIL, LAST_SYNC, SERVE_NOW, SERVE_FORECAST, SYNCING, FOLLOWED = range(9)
STATE = 9
NT, NI = len(TTFT_BUCKETS) + 1, len(ITL_BUCKETS) + 1
LOSS_WINDOWS = 1024  # windows of loss_delta projected per stop


def encode_policies(blocks, windows: int) -> tuple | None:
    """Per run: ``kind``, a parameter row (columns above) and a row of ``fixed`` (the
    decision per window of ``random_deferral`` and ``matched_random``; -1 for the others);
    None when a block's policy is not exactly one of the known classes, or a schedule is not
    one row per run and window (the reference loop then runs). Call after ``reset``."""
    if not all(_known(b.policy, len(b.seeds), windows) for b in blocks):
        return None  # before any random deferral draws: the reference loop draws them
    kinds, params, rows, fixed = [], [], [], []
    for b in blocks:
        n = len(b.seeds)
        kind, row, decisions = _encode(b.policy, n, windows)
        kinds.append(np.full(n, kind, np.int64))
        params.append(np.tile(row, (n, 1)))
        if decisions is None:
            rows.append(np.full(n, -1, np.int64))
        else:
            start = sum(len(f) for f in fixed)
            rows.append(start + np.arange(n, dtype=np.int64))
            fixed.append(decisions)
    table = np.concatenate(fixed) if fixed else np.zeros((1, windows), bool)
    return np.concatenate(kinds), np.concatenate(params), np.concatenate(rows), table


def _known(policy, n: int, windows: int) -> bool:
    """Is ``policy`` exactly one of the encoded classes, with one generator (random
    deferral) or one schedule row of at least ``windows`` (matched random) per run?"""
    kind = type(policy)
    if kind is RandomDeferral:
        return len(policy.rngs) == n
    if kind is Schedule:
        at = np.asarray(policy.sync_at)
        return at.ndim == 2 and at.shape[0] == n and at.shape[1] >= windows
    return kind in (FixedH, AdaptiveTokens, AdaptiveLoad, PressureGate, WADiLoCo)


def _encode(policy, n: int, windows: int):
    """(kind, parameter row, decision rows or None) of one :func:`_known` policy."""
    row = np.zeros(N_PARAMS)
    row[MIN_H], row[MAX_H] = policy.min_h, policy.max_h
    kind = type(policy)
    if kind is FixedH:
        row[LIMIT] = policy.H
        return FIXED_H, row, None
    if kind is AdaptiveTokens:
        row[LIMIT] = policy.min_tokens
        return TOKENS, row, None
    if kind in (AdaptiveLoad, PressureGate):
        row[LIMIT] = policy.threshold
        return (LOAD if kind is AdaptiveLoad else GATE), row, None
    if kind is RandomDeferral:  # Policy.decide draws every window, so draw them all now
        u = [rng.uniform(size=(windows, policy.learners)) for rng in policy.rngs]
        return RANDOM, row, np.stack([(x >= policy.p).all(axis=1) for x in u])
    if kind is Schedule:
        return SCHEDULE, row, np.asarray(policy.sync_at, bool)[:, :windows]
    row[THRESHOLD], row[W_NET], row[W_INF] = policy.threshold, policy.w_net, policy.w_inf
    row[W_CKPT], row[W_SERVE] = policy.w_ckpt, policy.w_serve
    row[STALE] = policy.stale_sign * policy.w_stale  # the reference's left-to-right product
    row[SERVE_SCALE], row[LOSS_SCALE] = policy.serve_scale, policy.loss_scale
    row[TOKENS_NORM], row[SIGNAL] = policy.tokens_norm, SIGNALS[policy.signal]
    return WA, row, None


@numba.njit(cache=True, inline="always", _nrt=False)
def _cap(x):
    return min(max(x, 0.0), 1.0)


@numba.njit(cache=True, inline="always", _nrt=False)
def _fmax(a, b):
    """``np.fmax``: the larger, ignoring a NaN."""
    if a != a:
        return b
    if b != b:
        return a
    return max(a, b)


@numba.njit(cache=True, _nrt=False)
def _busy(t0, dt, su):
    """Seconds of ``[t0, t0 + dt)`` spent syncing: ``clip(min(su, t0 + dt) − t0, 0, dt)``."""
    return min(max(min(su, t0 + dt) - t0, 0.0), dt)


@numba.njit(cache=True, _nrt=False)
def _share_above(c, k, lo, n_b, b, keep):
    """:func:`~.telemetry.share_above_per_bucket` of the histogram ``c[k, lo : lo + n_b]``
    (bucket ``b`` holds the SLO, ``keep = 1 − frac``; ``b = n_b − 1``: the +Inf bucket)."""
    n = 0.0
    for i in range(n_b):
        n += c[k, lo + i]
    if not n > 0:
        return np.nan
    if b >= n_b - 1:
        return c[k, lo + n_b - 1] / n
    above = 0.0
    for i in range(b + 1, n_b):
        above += c[k, lo + i]
    return (above + c[k, lo + b] * keep) / n


@numba.njit(cache=True, _nrt=False)
def _inference(c, k, sc, ib):
    """:func:`~.fleet.server_pressure` of run ``k``'s window counters."""
    ttft = _share_above(c, k, TTFT_HIST, NT, ib[0], sc[TTFT_KEEP])
    itl = _share_above(c, k, ITL_HIST, NI, ib[1], sc[ITL_KEEP])
    latency = _fmax(ttft, itl) / sc[TAIL]
    load = max(c[k, KV_FRAC], c[k, WAITING] / sc[QUEUE_SCALE])
    return _cap(_fmax(load, latency))


@numba.njit(cache=True, _nrt=False)
def _want(kind, p, fixed_row, w, h, tokens, net, inf, ckpt, serve, stale, loss):
    """A run's decision (:mod:`~.policies`); ``loss`` is ``loss_delta`` (``wa_*`` only)."""
    if kind == FIXED_H:
        return h >= p[LIMIT]
    if kind == TOKENS:
        return h >= p[MAX_H] or tokens >= p[LIMIT]
    if kind == SCHEDULE:
        return fixed_row[w]
    if h >= p[MAX_H]:
        return True
    if not h >= p[MIN_H]:
        return False
    if kind == LOAD:
        return 0.5 * net + 0.5 * inf + 0.25 * ckpt <= p[LIMIT]
    if kind == GATE:
        return max(max(net, inf), ckpt) <= p[LIMIT]
    if kind == RANDOM:
        return fixed_row[w]
    progress = 0.5 * _cap(loss / p[LOSS_SCALE]) + 0.5 * _cap(tokens / p[TOKENS_NORM])
    pressure = (
        p[W_NET] * net
        + p[W_INF] * inf
        + p[W_CKPT] * ckpt
        + p[W_SERVE] * _cap(serve / p[SERVE_SCALE])
        + p[STALE] * _cap(stale / 1800.0)
    )
    return progress - pressure > p[THRESHOLD]


@numba.njit(cache=True, _nrt=False)
def _reads_signals(kind, p, h):
    """Does the decision read the pressures (and a ``wa_*`` one ``loss_delta``): a guarded
    policy that looks at them, between its guards?"""
    looks = LOAD <= kind <= GATE or kind == WA
    return looks and h >= p[MIN_H] and not h >= p[MAX_H]


@numba.njit(cache=True, nogil=True, _nrt=False)
def run(
    todo,
    W,
    sync,
    compat,
    sc,
    ib,
    kind,
    pp,
    prow,
    fixed,
    state,
    wcur,
    loss,
    loss_w0,
    loss_n,
    req_of,
    load_s,
    load_row,
    next_s,
    next_row,
    bg,
    noise,
    engine,
    requests,
    serving,
    wc,
    totals,
    started,
    viol,
    fin,
    ref,
    joined,
):
    """Advance every run in ``todo`` from its window ``wcur[k]`` to the horizon ``W``, or
    until it needs a ``loss_delta`` not in its buffer (``wcur[k]`` then stays there).

    ``state[k]``: h, tokens, eff, sync_until, last_sync, serve_now, serve_forecast,
    syncing_s, and 1 when its last window was its seed's no-sync one (:data:`STATE`);
    ``loss[k, j]`` is the ``loss_delta`` of window ``loss_w0[k] + j`` for ``j <
    loss_n[k]``; ``bg``: network, background inference, checkpoint per window;
    ``engine``/``requests``: the engines' state and the packed request sets
    (:func:`~.serving.advance`); ``wc[k]``: the run's last window counters; ``totals[k]``:
    its outcome counters (FINISHED .. TPOT_VIOL) summed. ``ref``: the no-sync trajectories
    of :func:`record` (or empty: none); ``joined[k]``: while run ``k`` follows its seed's,
    the last window after which that one was idle, else -1."""
    dt, D, outer = sc[DT], sc[SYNC_S], sc[OUTER]
    ref_out, ref_inf, ref_idle, ref_head, ref_last = ref
    share = ref_idle.shape[0] > 0
    for i in range(todo.size):
        k = todo[i]
        st = state[k]
        fixed_row = fixed[max(prow[k], 0)]
        s = req_of[k]
        w = wcur[k]
        while w < W:
            t0 = w * dt
            net, ckpt = bg[0, w], bg[2, w]
            if sync and st[SYNC_UNTIL] <= t0:
                h = st[H]
                ld, inf = 0.0, 0.0
                if _reads_signals(kind[k], pp[k], h):
                    if kind[k] == WA:
                        j = w - loss_w0[k]
                        if not (0 <= j < loss_n[k]):
                            break  # the driver projects the loss and resumes here
                        ld = loss[k, j]
                    # the last window's pressure (from its counters; none at w = 0)
                    if compat:
                        inf = bg[1, w]
                    elif st[FOLLOWED]:
                        inf = ref_inf[s, w - 1]
                    else:
                        inf = _inference(wc, k, sc, ib)
                sig = pp[k, SIGNAL]
                serve = st[SERVE_NOW] if sig == 0.0 else st[SERVE_FORECAST]
                if sig == 2.0:
                    serve = next_s[next_row[k], w]
                stale = t0 - st[LAST_SYNC]
                tokens = st[TOKENS_]
                if _want(kind[k], pp[k], fixed_row, w, h, tokens, net, inf, ckpt, serve, stale, ld):
                    if joined[k] >= 0:  # leave the shared trajectory: its engines, to now
                        _resume_engines(k, s, joined[k], w, sc, engine, requests, serving, wc, ref)
                        joined[k] = -1
                    gain = tokens * (1.0 / (1.0 + h / sc[DRIFT])) * outer
                    st[EFF] += gain
                    st[H] = 0.0
                    st[TOKENS_] = 0.0
                    st[SYNC_UNTIL] = t0 + D
                    st[LAST_SYNC] = t0 + D
                    started[k, w] = True
                    loss_n[k] = 0
            st[FOLLOWED] = joined[k] >= 0
            if joined[k] >= 0:  # the shared trajectory's window, as its engines ran it
                for c in range(4):
                    totals[k, c] += ref_out[s, w, c]
                viol[k, w], fin[k, w] = ref_out[s, w, VIOLATED], ref_out[s, w, FINISHED]
                if ref_idle[s, w]:
                    joined[k] = w
            else:
                wc[k, :] = 0.0
                if compat:
                    syncing = st[SYNC_UNTIL] > t0
                    _sidecar(wc, k, net, bg[1, w], ckpt, syncing, noise[s, w], sc[SLO_MS])
                else:
                    _serve(k, s, t0 + dt, st[SYNC_UNTIL], engine, requests, serving, wc)
                for c in range(4):
                    totals[k, c] += wc[k, c]
                viol[k, w], fin[k, w] = wc[k, VIOLATED], wc[k, FINISHED]
                # idle in its seed's no-sync state (module doc), its sync over: rejoin it
                idle = share and st[SYNC_UNTIL] <= t0 + dt and ref_idle[s, w]
                if idle and _idle(k, t0 + dt, engine):
                    joined[k] = w
            _progress(st, t0, sc)
            st[SERVE_NOW] = load_s[load_row[k], w]
            st[SERVE_FORECAST] = sc[ALPHA] * st[SERVE_NOW] + sc[KEEP] * st[SERVE_FORECAST]
            w += 1
        wcur[k] = w
        if w == W and st[FOLLOWED]:
            for c in range(wc.shape[1]):
                wc[k, c] = ref_last[s, c]


@numba.njit(cache=True, _nrt=False)
def _serve(k, s, t_end, su, engine, requests, serving, wc):
    """Run ``k``'s engines (request set ``s``, sync until ``su``) to ``t_end``, adding the
    window's counters to ``wc[k]`` (:func:`~.serving.advance_run`)."""
    T, head, sreq, sleft, sfirst, kv, top = engine
    arrival, prompt, output, n_req = requests
    par, rec, ttft_b, itl_b = serving
    advance_run(
        k, T, head, sreq, sleft, sfirst, kv, top, arrival, prompt, output, n_req, s, t_end, su,
        par, wc, rec, False, ttft_b, itl_b,
    )  # fmt: skip


@numba.njit(cache=True, _nrt=False)
def _idle(k, t_end, engine):
    """Are run ``k``'s engines all idle at ``t_end``: nothing running, clocks at ``t_end``?
    Then every request that arrived before ``t_end`` was admitted and has finished, none
    holds KV, and the next request of each replica is the first to arrive from ``t_end``
    on: the state is a function of ``t_end`` and the request set alone."""
    T, top = engine[0], engine[6]
    for q in range(T.shape[1]):  # noqa: SIM110 (numba: no all() over a generator)
        if top[k, q] != 0 or T[k, q] != t_end:
            return False
    return True


@numba.njit(cache=True, _nrt=False)
def _resume_engines(k, s, idle_w, w, sc, engine, requests, serving, wc, ref):
    """Run ``k``'s own engines again, as its seed's no-sync trajectory has them at the start
    of window ``w``: that trajectory's idle state after window ``idle_w`` (clocks at the
    window's end, its next requests; run ``k``'s engines were left idle when it joined, with
    nothing running and no KV reserved), run on to ``w``."""
    T, head = engine[0], engine[1]
    dt = sc[DT]
    for q in range(T.shape[1]):
        T[k, q] = idle_w * dt + dt
        head[k, q] = ref[3][s, idle_w, q]
    for v in range(idle_w + 1, w):
        wc[k, :] = 0.0
        _serve(k, s, v * dt + dt, -np.inf, engine, requests, serving, wc)


@numba.njit(cache=True, nogil=True, _nrt=False)
def record(todo, W, sc, ib, engine, requests, serving, wc, ref):
    """The no-sync trajectory of every request set ``i`` in ``todo`` (engine row ``i``):
    per window its outcome counters, the pressure the next window reads, whether its
    engines are idle at the window's end and their next requests; its last window's
    counters (``ref``: out, inf, idle, head, last)."""
    ref_out, ref_inf, ref_idle, ref_head, ref_last = ref
    head = engine[1]
    dt = sc[DT]
    for j in range(todo.size):
        i = todo[j]
        for w in range(W):
            t_end = w * dt + dt
            wc[i, :] = 0.0
            _serve(i, i, t_end, -np.inf, engine, requests, serving, wc)
            for c in range(4):
                ref_out[i, w, c] = wc[i, c]
            ref_inf[i, w] = _inference(wc, i, sc, ib)
            ref_idle[i, w] = _idle(i, t_end, engine)
            for q in range(head.shape[1]):
                ref_head[i, w, q] = head[i, q]
        for c in range(wc.shape[1]):
            ref_last[i, c] = wc[i, c]


@numba.njit(cache=True, _nrt=False)
def _progress(st, t0, sc):
    """End of a window: the time it spent syncing, the learners' steps and tokens."""
    dt = sc[DT]
    busy = _busy(t0, dt, st[SYNC_UNTIL])
    st[SYNCING] += busy
    steps = (dt - busy) * sc[STEPS_PER_S]
    st[H] += steps
    st[TOKENS_] += steps * sc[TOKENS_PER_STEP]


@numba.njit(cache=True, _nrt=False)
def _sidecar(wc, k, net, inf, ckpt, syncing, noise, slo_ms):
    """The artifact's sidecar in one window (:func:`~.fleet.sidecar_latency_ms`): one
    request per noise draw, those over ``slo_ms`` violated."""
    burst = 35.0 * (0.35 + 0.65 * max(net, inf)) if syncing else 0.0
    base = 55 + 24 * net + 34 * inf + 16 * ckpt + burst
    late = 0
    for r in range(noise.size):
        if base + 6 * noise[r] > slo_ms:
            late += 1
    wc[k, FINISHED] = noise.size
    wc[k, VIOLATED] = late


@numba.njit(cache=True)
def project(runs, wcur, state, sc, M):
    """``eff + gain`` of each run in ``runs`` for its next ``M`` windows from ``wcur`` as if
    it did not sync (the arithmetic of :func:`run`), ``[len(runs), M]``; ``eff`` stays."""
    x = np.empty((runs.size, M))
    st = np.empty(STATE)
    for i in range(runs.size):
        k = runs[i]
        st[:] = state[k]
        for j in range(M):
            x[i, j] = st[EFF] + st[TOKENS_] * (1.0 / (1.0 + st[H] / sc[DRIFT])) * sc[OUTER]
            _progress(st, (wcur[k] + j) * sc[DT], sc)
    return x
