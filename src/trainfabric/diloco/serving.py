"""Serving replicas as continuous-batching engines, simulated request by request (numba).

Each run has ``R`` replicas; request ``i`` of a run's :class:`~trainfabric.diloco.requests.Requests`
goes to replica ``i mod R`` (round-robin dispatch). A replica is one engine:

* **admission** — FIFO in arrival order; the head request is admitted when the batch has a
  free slot (``max_batch``) and its KV reservation ``prompt + output`` tokens fits
  (``kv_tokens``); a request never overtakes an earlier one on its replica;
* **prefill** — admitting a request costs ``prefill_s_per_token · prompt`` seconds of engine
  time; its first token is out at the end: ``TTFT = first token − arrival``. ``prefill``
  ``blocking`` (the default): decoding pauses meanwhile; ``chunked`` (vLLM's V1 scheduler,
  which mixes prefill chunks into the decode batches): the running requests keep decoding at
  their iteration rate while one prefill at a time proceeds, so a prefill delays the queue's
  first tokens but not the others' TPOT (the prefilling request holds its slot and its KV
  from admission; its TTFT is observed in the histogram when admitted, valued at its first
  token);
* **decode** — every running request gains one token per iteration of
  ``decode_base_s + decode_per_seq_s · batch`` seconds (the fluid limit: tokens advance
  continuously between events); a request leaves after its last token and frees its KV:
  ``TPOT = (finish − first token) / (output − 1)``;
* **interference** — while a DiLoCo outer sync runs (``t < sync_until``), every engine second
  of work takes ``1 + interference`` seconds (the sync's all-reduce and outer step contend for
  the same HBM, PCIe/NVLink and NICs). A documented model, calibrated by real replay;
* **link sharing** — when serving's requests and responses cross the link a sync fills (the
  live testbed, :mod:`~.live_testbed`), a request whose lifetime ``[arrival, finish]``
  overlaps a sync and that the engine serves within its SLO still misses it with probability
  ``link_violation_p`` (a packet of it queued or dropped behind the sync's bytes); it counts
  as that fraction of a TTFT violation (an expected count: the rates stay exact
  expectations, no draw). 0, the default, is the engine alone, to the bit;
* **failures** — a request the engine serves in time still fails with probability
  ``failure_p`` (its stream breaks: a real client sees an error, not a latency), counted
  as that fraction of a violation, independently of the link term: a request on time
  counts ``1 − (1 − link)(1 − failure_p)``. 0, the default: none.

A request violates the SLO when ``TTFT > ttft_slo_s`` or ``TPOT > tpot_slo_s``; it is counted in
the window in which it finishes. A request still unfinished at the horizon (waiting, or
admitted and still in prefill or decode) counts as a violation once it is past its SLO there:
no first token ``ttft_slo_s`` after arriving, a first token that came late, or a TPOT over its
SLO even if every remaining token came at once (``(horizon − first token) / (output − 1) >
tpot_slo_s``). Those are in the numerator and the denominator of every rate of
:func:`violation_rates` (so a prompt that blocks a replica for longer than the run does not
take its queue out of the denominator and report 0%); an unfinished request not yet past its
SLO has no outcome yet (censored) and is in neither.

**Telemetry per window** (what a vLLM server's ``/metrics`` shows, :mod:`~.telemetry`): the
gauges at the window's end (waiting and running requests over all replicas, KV-cache use =
tokens in flight, prompt plus generated so far, over ``kv_tokens``, averaged over replicas)
and histograms at vLLM's bucket bounds of the window's TTFT observations (one per request, when
its first token is out) and inter-token latencies (a request's ``output − 1`` gaps, recorded
when it finishes, each valued at its mean gap, its TPOT: the fluid model has no per-token
times). Everything is in seconds and tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
from pydantic import Field

from trainfabric.config import Config
from trainfabric.diloco.telemetry import ITL_BUCKETS, MAX_SLO_S, TTFT_BUCKETS

MAX_BATCH = 65_536  # sequences per replica: vLLM's default max_num_seqs is 256
MAX_KV_TOKENS = 4_294_967_296  # 2^32 tokens per replica, far above any node's KV cache
MAX_STEP_S = 60.0  # seconds per prompt token, decode iteration or running sequence
MAX_INTERFERENCE = 1000.0  # a sync slowing every engine 1,000-fold


class ServingModel(Config):
    """Engine parameters (defaults: a ~1B-parameter model on one accelerator per replica).

    Every size has an upper bound, refused naming the field: ``replicas`` <= 64,
    ``max_batch`` <= 65,536 (an engine keeps a slot array of this size per run),
    ``kv_tokens`` <= 2^32, the per-token and per-iteration times <= 60 s, ``interference``
    <= 1,000, the SLOs <= 3,600 s."""

    replicas: int = Field(2, ge=1, le=64)
    max_batch: int = Field(32, ge=1, le=MAX_BATCH, description="running sequences per replica")
    kv_tokens: int = Field(
        131_072, ge=1, le=MAX_KV_TOKENS, description="KV-cache capacity per replica (tokens)"
    )
    prefill_s_per_token: float = Field(4e-5, gt=0, le=MAX_STEP_S, description="25k prompt tokens/s")
    decode_base_s: float = Field(
        0.012, gt=0, le=MAX_STEP_S, description="decode iteration, empty batch"
    )
    decode_per_seq_s: float = Field(0.0006, ge=0, le=MAX_STEP_S, description="per running sequence")
    interference: float = Field(
        1.0, ge=0, le=MAX_INTERFERENCE, description="extra time per second during a sync"
    )
    ttft_slo_s: float = Field(0.5, gt=0, le=MAX_SLO_S)
    tpot_slo_s: float = Field(0.05, gt=0, le=MAX_SLO_S)
    link_violation_p: float = Field(
        0.0, ge=0, le=1, description="P(SLO missed on the link | lifetime overlaps a sync)"
    )
    failure_p: float = Field(0.0, ge=0, le=1, description="P(a request's stream fails)")
    prefill: Literal["blocking", "chunked"] = Field(
        "blocking", description="decoding pauses during a prefill, or continues (chunked)"
    )

    def params(self) -> np.ndarray:
        return np.array(
            [
                self.prefill_s_per_token,
                self.decode_base_s,
                self.decode_per_seq_s,
                self.interference,
                self.ttft_slo_s,
                self.tpot_slo_s,
                float(self.kv_tokens),
                float(self.max_batch),
                self.link_violation_p,
                float(self.prefill == "chunked"),
                self.failure_p,
            ]
        )


# window counters, per run: counts, gauges at the window's end (WAITING .. KV_FRAC), the
# unfinished requests past their SLO at the window's end (LATE*), then the per-bucket (not
# cumulative) counts of the TTFT and ITL histograms, their last bucket the +Inf one
FINISHED, VIOLATED, TTFT_VIOL, TPOT_VIOL, WAITING, RUNNING, BUSY_S, KV_FRAC = range(8)
LATE, LATE_TTFT, LATE_TPOT = range(8, 11)
TTFT_HIST = 11
ITL_HIST = TTFT_HIST + len(TTFT_BUCKETS) + 1
N_COUNTERS = ITL_HIST + len(ITL_BUCKETS) + 1
_TTFT_B = np.array(TTFT_BUCKETS)
_ITL_B = np.array(ITL_BUCKETS)


def histogram(counters: np.ndarray, which: str) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative bucket counts ``[..., nb]`` at the finite bounds and the total ``[...]``
    of the ``ttft`` or ``itl`` histogram in window counters (summed over windows: cumulative)."""
    lo, nb = (TTFT_HIST, len(TTFT_BUCKETS)) if which == "ttft" else (ITL_HIST, len(ITL_BUCKETS))
    cum = np.cumsum(counters[..., lo : lo + nb + 1], axis=-1)
    return cum[..., :nb], cum[..., nb]


def violation_rates(totals: np.ndarray, last: np.ndarray) -> dict[str, np.ndarray]:
    """SLO outcomes per run over every request with an outcome by the horizon.

    ``totals`` are the window counters summed over a run's windows and ``last`` those of its
    final window: its ``WAITING + RUNNING`` are the requests unfinished at the horizon, ``u``
    of them already past their SLO (``LATE``; ``LATE_TTFT``, ``LATE_TPOT`` per SLO). With
    ``f`` finished requests of which ``v`` violated (``v_ttft``, ``v_tpot`` per SLO):
    ``slo_violation_rate = (v + u) / (f + u)``, ``ttft_violation_rate = (v_ttft + u_ttft) /
    (f + u)``, likewise TPOT; 0 when there is none. Also returns ``requests`` (arrived),
    ``unfinished_requests`` and ``late_unfinished = u``.
    """
    u = last[:, LATE]
    denom = np.maximum(totals[:, FINISHED] + u, 1)
    unfinished = last[:, WAITING] + last[:, RUNNING]
    return {
        "slo_violation_rate": (totals[:, VIOLATED] + u) / denom,
        "ttft_violation_rate": (totals[:, TTFT_VIOL] + last[:, LATE_TTFT]) / denom,
        "tpot_violation_rate": (totals[:, TPOT_VIOL] + last[:, LATE_TPOT]) / denom,
        "requests": totals[:, FINISHED] + unfinished,
        "unfinished_requests": unfinished,
        "late_unfinished": u,
    }


@dataclass
class EngineState:
    """State of ``runs x replicas`` engines; run ``k`` serves request set ``req_of[k]``."""

    t: np.ndarray  # [K, R] engine time
    head: np.ndarray  # [K, R] next request (global index) not yet admitted
    slot_req: np.ndarray  # [K, R, B] request id per batch slot (-1 free)
    slot_left: np.ndarray  # [K, R, B] tokens left to decode
    slot_first: np.ndarray  # [K, R, B] first-token time
    kv: np.ndarray  # [K, R] reserved KV tokens
    top: np.ndarray  # [K, R] one past the highest occupied slot (every slot above is free)

    @classmethod
    def empty(cls, runs: int, model: ServingModel) -> EngineState:
        R, B = model.replicas, model.max_batch
        head = np.tile(np.arange(R, dtype=np.int64), (runs, 1))
        return cls(
            t=np.zeros((runs, R)),
            head=head,
            slot_req=np.full((runs, R, B), -1, np.int64),
            slot_left=np.zeros((runs, R, B)),
            slot_first=np.zeros((runs, R, B)),
            kv=np.zeros((runs, R)),
            top=np.zeros((runs, R), np.int64),
        )


def advance(
    state: EngineState,
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    n_req: np.ndarray,
    req_of: np.ndarray,
    t_end: float,
    sync_until: np.ndarray,
    model: ServingModel,
    record: np.ndarray | None = None,
) -> np.ndarray:
    """Simulate every engine up to ``t_end``; returns window counters ``[runs, N_COUNTERS]``.

    ``arrival/prompt/output[s, i]`` (padded) and ``n_req[s]`` hold request set ``s``;
    ``req_of[k]`` is the set of run ``k``. ``record[k, i, :]`` (optional) receives
    (first token, finish) of every request of run ``k``.
    """
    counters = np.zeros((req_of.size, N_COUNTERS))
    rec = np.zeros((1, 1, 2)) if record is None else record
    _advance(
        state.t,
        state.head,
        state.slot_req,
        state.slot_left,
        state.slot_first,
        state.kv,
        state.top,
        arrival,
        prompt,
        output,
        n_req,
        req_of,
        float(t_end),
        sync_until,
        model.params(),
        counters,
        rec,
        record is not None,
        _TTFT_B,
        _ITL_B,
    )
    return counters


# The engine's kernels allocate nothing, so they run without numba's reference counting
# (``_nrt=False``): counting every array argument of every call (atomic increments) took most
# of the engine's time, and two threads sharing the arrays contended for the same counters.
@numba.njit(cache=True, _nrt=False)
def _work_end(t, work, sync_until, slow):
    """When ``work`` engine-seconds started at ``t`` end, at speed ``1/slow`` before
    ``sync_until`` and 1 after."""
    if t >= sync_until:
        return t + work
    slowed = (sync_until - t) / slow  # work done before the sync ends
    if work <= slowed:
        return t + work * slow
    return sync_until + (work - slowed)


@numba.njit(cache=True, _nrt=False)
def _work_done(t0, t1, sync_until, slow):
    """Engine-seconds of work done in ``[t0, t1]``."""
    if t1 <= sync_until:
        return (t1 - t0) / slow
    if t0 >= sync_until:
        return t1 - t0
    return (sync_until - t0) / slow + (t1 - sync_until)


@numba.njit(cache=True, _nrt=False)
def _observe(counters, k, col, bounds, value, weight):
    """Add ``weight`` observations of ``value`` to the histogram at column ``col``."""
    counters[k, col + np.searchsorted(bounds, value)] += weight


@numba.njit(cache=True, _nrt=False)
def _finish(k, i, t, first, arr, out, par, counters, rec, recording, itl_b, su):
    """Count request ``i`` finishing at ``t`` (first token at ``first``) in run ``k``;
    ``su``: the end of the run's latest sync (started by ``t``: its lifetime overlaps one
    exactly when ``su > arr``)."""
    ttft = first - arr
    tpot = (t - first) / (out - 1) if out > 1 else 0.0
    bad_ttft = ttft > par[4]
    bad_tpot = tpot > par[5]
    if out > 1:
        _observe(counters, k, ITL_HIST, itl_b, tpot, out - 1.0)
    link = par[8] if su > arr else 0.0  # the link-sharing term (module doc)
    counters[k, FINISHED] += 1
    counters[k, TTFT_VIOL] += 1.0 if bad_ttft else link
    counters[k, TPOT_VIOL] += bad_tpot
    counters[k, VIOLATED] += 1.0 if bad_ttft or bad_tpot else 1.0 - (1.0 - link) * (1.0 - par[10])
    if recording:
        rec[k, i, 0] = first
        rec[k, i, 1] = t


@numba.njit(cache=True, _nrt=False)
def _advance(
    T,
    head,
    sreq,
    sleft,
    sfirst,
    kv,
    top,
    arrival,
    prompt,
    output,
    n_req,
    req_of,
    t_end,
    sync_until,
    par,
    counters,
    rec,
    recording,
    ttft_b,
    itl_b,
):
    """Every run's engines up to ``t_end`` (:func:`advance_run` per run)."""
    for k in range(T.shape[0]):
        advance_run(
            k,
            T,
            head,
            sreq,
            sleft,
            sfirst,
            kv,
            top,
            arrival,
            prompt,
            output,
            n_req,
            req_of[k],
            t_end,
            sync_until[k],
            par,
            counters,
            rec,
            recording,
            ttft_b,
            itl_b,
        )


@numba.njit(cache=True, _nrt=False)
def advance_run(
    k,
    T,
    head,
    sreq,
    sleft,
    sfirst,
    kv,
    top,
    arrival,
    prompt,
    output,
    n_req,
    s,
    t_end,
    su,
    par,
    counters,
    rec,
    recording,
    ttft_b,
    itl_b,
):
    """Run ``k``'s engines (request set ``s``, sync until ``su``) up to ``t_end``, adding its
    window counters to ``counters[k]`` (the body of :func:`advance` for one run, shared with
    the compiled fleet loop, :mod:`~.fleet_kernel`)."""
    if par[9] > 0.5:
        _advance_chunked(
            k,
            T,
            head,
            sreq,
            sleft,
            sfirst,
            kv,
            top,
            arrival,
            prompt,
            output,
            n_req,
            s,
            t_end,
            su,
            par,
            counters,
            rec,
            recording,
            ttft_b,
            itl_b,
        )
        return
    c_pf, d0, d1, interf, kv_cap, bmax = par[0], par[1], par[2], par[3], par[6], int(par[7])
    slow = 1.0 + interf
    R = T.shape[1]
    n = n_req[s]
    for q in range(R):
        t = T[k, q]
        busy = 0.0
        while t < t_end:
            h = head[k, q]
            n_run = 0
            free = -1
            min_left = 1e300
            hi = top[k, q]  # slots are taken lowest first: scan only the occupied prefix
            for b in range(hi):
                if sreq[k, q, b] >= 0:
                    n_run += 1
                    min_left = min(min_left, sleft[k, q, b])
                elif free < 0:
                    free = b
            if free < 0 and hi < bmax:
                free = hi
            # admit the FIFO head if it fits (an oversized one only into an empty engine)
            if h < n and arrival[s, h] <= t and free >= 0:
                need = prompt[s, h] + output[s, h]
                if kv[k, q] + need <= kv_cap or n_run == 0:
                    t_pf = _work_end(t, c_pf * prompt[s, h], su, slow)  # decoding pauses
                    busy += t_pf - t
                    t = t_pf
                    head[k, q] = h + R
                    _observe(counters, k, TTFT_HIST, ttft_b, t - arrival[s, h], 1.0)
                    if output[s, h] <= 1:
                        _finish(
                            k,
                            h,
                            t,
                            t,
                            arrival[s, h],
                            output[s, h],
                            par,
                            counters,
                            rec,
                            recording,
                            itl_b,
                            su,
                        )
                    else:
                        kv[k, q] += need
                        sreq[k, q, free] = h
                        sleft[k, q, free] = output[s, h] - 1.0
                        sfirst[k, q, free] = t
                        top[k, q] = max(hi, free + 1)
                    continue
            nxt = t_end
            if h < n and arrival[s, h] > t:  # the head may be admitted when it arrives
                nxt = min(nxt, arrival[s, h])
            if n_run == 0:
                t = nxt
                continue
            if t < su < nxt:
                nxt = su
            tau = d0 + d1 * n_run  # engine-seconds per token
            t1 = min(nxt, _work_end(t, min_left * tau, su, slow))
            tokens = _work_done(t, t1, su, slow) / tau
            busy += t1 - t
            t = t1
            for b in range(hi):
                r = sreq[k, q, b]
                if r < 0:
                    continue
                sleft[k, q, b] -= tokens
                if sleft[k, q, b] <= 1e-7:
                    kv[k, q] -= prompt[s, r] + output[s, r]
                    _finish(
                        k,
                        r,
                        t,
                        sfirst[k, q, b],
                        arrival[s, r],
                        output[s, r],
                        par,
                        counters,
                        rec,
                        recording,
                        itl_b,
                        su,
                    )
                    sreq[k, q, b] = -1
            while hi > 0 and sreq[k, q, hi - 1] < 0:
                hi -= 1
            top[k, q] = hi
        T[k, q] = t
        counters[k, BUSY_S] += busy
        _gauges(
            k,
            q,
            s,
            n,
            R,
            head,
            sreq,
            sleft,
            sfirst,
            top,
            arrival,
            prompt,
            output,
            t_end,
            par,
            counters,
        )


@numba.njit(cache=True, _nrt=False)
def _advance_chunked(k, T, head, sreq, sleft, sfirst, kv, top, arrival, prompt, output, n_req,
                     s, t_end, su, par, counters, rec, recording, ttft_b, itl_b):  # fmt: skip
    """:func:`advance_run` with ``prefill`` chunked (module doc). A slot whose first token
    is still ahead (``sfirst > t``) is the replica's one prefill in progress: it does not
    decode, and no other request is admitted until it ends; at its end a one-token request
    finishes, any other starts decoding."""
    c_pf, d0, d1, interf, kv_cap, bmax = par[0], par[1], par[2], par[3], par[6], int(par[7])
    slow = 1.0 + interf
    R = T.shape[1]
    n = n_req[s]
    for q in range(R):
        t = T[k, q]
        busy = 0.0
        while t < t_end:
            h = head[k, q]
            n_run = 0
            n_busy = 0
            free = -1
            min_left = 1e300
            pf_end = 1e300
            hi = top[k, q]
            for b in range(hi):
                if sreq[k, q, b] < 0:
                    if free < 0:
                        free = b
                    continue
                n_busy += 1
                if sfirst[k, q, b] > t:
                    pf_end = sfirst[k, q, b]
                else:
                    n_run += 1
                    min_left = min(min_left, sleft[k, q, b])
            if free < 0 and hi < bmax:
                free = hi
            if pf_end == 1e300 and h < n and arrival[s, h] <= t and free >= 0:
                need = prompt[s, h] + output[s, h]
                if kv[k, q] + need <= kv_cap or n_busy == 0:
                    t_pf = _work_end(t, c_pf * prompt[s, h], su, slow)
                    head[k, q] = h + R
                    _observe(counters, k, TTFT_HIST, ttft_b, t_pf - arrival[s, h], 1.0)
                    kv[k, q] += need
                    sreq[k, q, free] = h
                    sleft[k, q, free] = max(output[s, h] - 1.0, 0.0)
                    sfirst[k, q, free] = t_pf
                    top[k, q] = max(hi, free + 1)
                    continue
            nxt = min(t_end, pf_end)
            if pf_end == 1e300 and h < n and arrival[s, h] > t:
                nxt = min(nxt, arrival[s, h])
            if t < su < nxt:
                nxt = su
            if n_run == 0:
                t1 = nxt
                tokens = 0.0
            else:
                tau = d0 + d1 * n_run  # engine-seconds per token
                t1 = min(nxt, _work_end(t, min_left * tau, su, slow))
                tokens = _work_done(t, t1, su, slow) / tau
            if n_run > 0 or pf_end < 1e300:
                busy += t1 - t
            t0, t = t, t1
            for b in range(hi):
                r = sreq[k, q, b]
                if r < 0:
                    continue
                if sfirst[k, q, b] <= t0:
                    sleft[k, q, b] -= tokens
                elif sfirst[k, q, b] > t or sleft[k, q, b] > 1e-7:
                    continue  # still prefilling, or prefilled with tokens to decode
                if sleft[k, q, b] <= 1e-7:
                    kv[k, q] -= prompt[s, r] + output[s, r]
                    _finish(k, r, t, sfirst[k, q, b], arrival[s, r], output[s, r], par,
                            counters, rec, recording, itl_b, su)  # fmt: skip
                    sreq[k, q, b] = -1
            while hi > 0 and sreq[k, q, hi - 1] < 0:
                hi -= 1
            top[k, q] = hi
        T[k, q] = t
        counters[k, BUSY_S] += busy
        _gauges(k, q, s, n, R, head, sreq, sleft, sfirst, top, arrival, prompt, output, t_end,
                par, counters)  # fmt: skip


@numba.njit(cache=True, _nrt=False)
def _gauges(
    k, q, s, n, R, head, sreq, sleft, sfirst, top, arrival, prompt, output, t_end, par, counters
):
    """Waiting, running, KV in flight and the unfinished requests past their SLO at ``t_end``."""
    waiting = 0
    h = head[k, q]
    while h < n and arrival[s, h] <= t_end:
        waiting += 1
        late = t_end - arrival[s, h] > par[4]
        counters[k, LATE] += late
        counters[k, LATE_TTFT] += late
        h += R
    counters[k, WAITING] += waiting
    running = 0
    in_flight = 0.0
    for b in range(top[k, q]):
        r = sreq[k, q, b]
        if r < 0:
            continue
        running += 1
        in_flight += prompt[s, r] + output[s, r] - sleft[k, q, b]
        first = sfirst[k, q, b]
        late_ttft = min(first, t_end) - arrival[s, r] > par[4]
        late_tpot = first <= t_end and (t_end - first) / (output[s, r] - 1) > par[5]
        counters[k, LATE] += late_ttft or late_tpot
        counters[k, LATE_TTFT] += late_ttft
        counters[k, LATE_TPOT] += late_tpot
    counters[k, RUNNING] += running
    counters[k, KV_FRAC] += min(in_flight / par[6], 1.0) / R
