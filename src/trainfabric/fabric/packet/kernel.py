"""The packet engine's event loop, compiled with numba. Every ``@njit`` of the engine lives in
this one module: it shares no kernel with the other engines (DESIGN.md, "Compiled code").

State is plain arrays sized up front, by name in a
:class:`~trainfabric.fabric.packet.state.PacketState` (``st.fi``, ``st.pi``, ...; built by
:func:`trainfabric.fabric.packet.driver.simulate_packets`): per flow ``fi[f, FI_*]`` /
``ff[f, FF_*]``, per directed link ``li`` / ``lf``,
per packet in flight a pool record ``pi[k, P_*]`` / ``pf[k, PF_*]`` (free list through
``P_NEXT``), per data packet of every flow (global sequence ``g = off[f] + s``) the receiver
bit ``got``, the sender state ``sst`` and send time ``stime``. Events are popped in the
order of ``(time, item)``, the item packing ``id * 16 + kind`` (equal times: the smaller
item first), from a timing wheel (section "event queue"), so a run is a pure function of
its inputs and seed (the only randomness is the xorshift64* generator ``rng``). The loop
prefetches the records of the next events (:func:`prefetch_ahead`): the wheel knows them.

Event kinds: ``ARRIVE`` (a packet's last bit reaches the far end of its link), ``WAKE``
(a busy link finished serialising: start the next queued packet), ``RELEASE`` (a flow
starts), ``PACE`` (a receiver's pull pacer may release a pull), ``RTO`` (a flow's
retransmission timer), ``LINKEV`` (a link changes state in truth), ``VIEW`` (a mechanism
learns it), ``PAUSE_ON`` / ``PAUSE_OFF`` (a PFC frame reaches the upstream transmitter).

The models themselves (queues, trimming, PFC, ECN, transports, load balancing) are
documented in :mod:`trainfabric.fabric.packet` and :mod:`trainfabric.fabric.packet.transport`.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# helpers never allocate: compiled without reference counting (NRT), which otherwise costs an
# atomic increment and decrement per array argument of every call; numpy's error model: no
# zero-divisor branch on every modulo / division (every divisor here is checked > 0)
hot = numba.njit(cache=True, _nrt=False, error_model="numpy")
# functions with one call site on the event path are inlined (numba passes every array
# argument as ~9 scalar parameters: a call with the state tuple copies hundreds of words)
once = numba.njit(cache=True, _nrt=False, inline="always", error_model="numpy")

# -- event kinds ---------------------------------------------------------------------------
K_ARRIVE, K_WAKE, K_RELEASE, K_PACE, K_RTO, K_LINKEV, K_VIEW, K_PON, K_POFF = range(9)
EVENT_KINDS = ("arrive", "wake", "release", "pace", "rto", "link", "view", "pause", "resume")
# -- packet types ----------------------------------------------------------------------------
T_DATA, T_HDR, T_ACK, T_NACK, T_PULL = range(5)
# -- modes -----------------------------------------------------------------------------------
M_ECMP, M_FLOWLET, M_PINNING, M_SPRAY, M_ADAPTIVE = range(5)
SW_LOSSLESS, SW_LOSSY, SW_TRIM = range(3)
TR_NDP, TR_DCTCP = range(2)
# -- status ----------------------------------------------------------------------------------
ST_OK, ST_POOL, ST_HEAP = 0, 1, 2
# -- counters (ctr, int64) ------------------------------------------------------------------
(
    C_NEV,
    C_HN,
    C_HSEQ_UNUSED,
    C_FREE,
    C_USED,
    C_RTX,
    C_DROP,
    C_TRIM,
    C_ECN,
    C_PAUSE,
    C_DUP,
    C_NLAT,
    C_STATUS,
    C_DONE,
    C_SENT,
    C_CTRL,
    C_USEDMAX,
    C_DOWN0,
    C_DOWN1,
    C_DOWN2,
    C_TIMEOUTS,
    C_MIGR,
    C_NOROUTE,
    C_SDONE,
    C_HMAX,
    C_KIND,  # 9 slots: events per kind
) = range(26)
# the event queue's state (section "event queue"): capacity, current bucket, the run's, far
# heap's and wheel's counts, the wheel's free list, its slot count and the run's first row
C_QCAP, C_QCUR, C_QACT, C_QFAR, C_QWHEEL, C_QFREE, C_QNB, C_QHEAD = range(C_KIND + 9, C_KIND + 17)
N_CTR = C_KIND + 17
# -- float parameters (fp) ------------------------------------------------------------------
(
    F_PROP,
    F_RTO,
    F_FLOWLET,
    F_RETIRE,
    F_REACT0,
    F_REACT1,
    F_REACT2,
    F_KMIN,
    F_KMAX,
    F_XOFF,
    F_XON,
    F_QCAP,
    F_PACE,
    F_UNTIL,
    F_GAIN,
    F_TLRES,
    F_LEV0,
    F_LEV1,
    F_LEV2,
    F_LEV3,
    N_FP,
) = range(21)
# -- int parameters (ip) --------------------------------------------------------------------
(
    I_MODE,
    I_SW,
    I_TR,
    I_MTU,
    I_HDR,
    I_IW,
    I_MAXW,
    I_NACKK,
    I_H,
    I_P,
    I_MIGRATE,
    I_VPLANE,
    I_VREMOTE,
    I_VFABRIC,
    I_ACKREL,
    I_NLEV,
    I_FAT,
    N_IP,
) = range(18)
# -- per-flow ints (fi) --------------------------------------------------------------------
(
    FI_SNDNXT,
    FI_SNDUNA,
    FI_INFL,
    FI_RQH,
    FI_RQT,
    FI_RCVNXT,
    FI_OOO,
    FI_ROMAX,
    FI_NACKUP,
    FI_CRED,
    FI_PULLNO,
    FI_PULLSEEN,
    FI_RTOPEND,
    FI_PLANE,
    FI_TARGET,
    FI_PINOUT,
    FI_PA,
    FI_PB,
    FI_PK,
    FI_PENDING,
    FI_WINEND,
    FI_ACKW,
    FI_MARKW,
    FI_CUTG,
    FI_RDONE,
    FI_SDONE,
    FI_NPATH,
    N_FI,
) = range(28)
# -- per-flow floats (ff) ------------------------------------------------------------------
(
    FF_START,
    FF_FINISH,
    FF_ACKED,
    FF_DELIV,
    FF_CWND,
    FF_ALPHA,
    FF_RTODL,
    FF_READY,
    FF_LASTMIG,
    FF_LOST,
    N_FF,
) = range(11)
N_RETIRE = 8
# -- per-link ints (li) ----------------------------------------------------------------------
L_QH0, L_QT0, L_QH1, L_QT1, L_WAKE, L_PAUSED, L_PFC, L_EPOCH, L_TRUTH, N_LI = range(10)
# -- per-link floats (lf) --------------------------------------------------------------------
(
    LF_BUSY,
    LF_QB0,
    LF_QB1,
    LF_ING,
    LF_AREA,
    LF_LAST,
    LF_MAX,
    LF_SER,
    LF_S0,
    LF_E0,
    LF_E1,
    LF_BYTES,
    N_LF,
) = range(13)
# -- pool ints (pi) --------------------------------------------------------------------------
(
    P_FLOW,
    P_SEQ,
    P_TYPE,
    P_SIZE,
    P_LINK,
    P_INLINK,
    P_EPOCH,
    P_PLANE,
    P_DST,
    P_NEXT,
    P_EV,
    P_ECN,
    P_AUX,
    P_CUM,
    N_PI,
) = range(15)
PF_T0, PF_SENT, N_PF = range(3)
# -- per-host (hi / hf): pull pacer ------------------------------------------------------------
H_PQH, H_PQT, H_ARMED, N_HI = range(4)
HF_NEXT, N_HF = range(2)

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


# == small utilities =========================================================================
@hot
def mix(a, b):
    """SplitMix64 finaliser of ``a ^ (b * golden)`` (uint64 -> uint64)."""
    h = np.uint64(a) ^ (np.uint64(b) * _GOLD)
    h = (h ^ (h >> np.uint64(30))) * _M1
    h = (h ^ (h >> np.uint64(27))) * _M2
    return h ^ (h >> np.uint64(31))


@hot
def rand(rng):
    """xorshift64* step of the state ``rng[0]``; a uint64."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    return x * np.uint64(0x2545F4914F6CDD1D)


@hot
def randint(rng, n):
    """Uniform integer in ``[0, n)``."""
    return np.int64((rand(rng) >> np.uint64(11)) % np.uint64(n))


@hot
def uniform(rng):
    return (rand(rng) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@hot
def gcd(a, b):
    while b:
        a, b = b, a % b
    return a


@intrinsic
def prefetch(typingctx, arr, row, col):
    """A hint: bring ``arr[row, col]`` (2-D array) into the cache, for a read soon (LLVM's
    ``llvm.prefetch``: changes no value, never faults, so any index is safe)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        kinds = signature.args[1:]
        idx = [
            context.cast(builder, a, t, types.intp) for a, t in zip(args[1:], kinds, strict=True)
        ]
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], fnty)  # llvmlite mangles
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])  # read, keep, data
        return context.get_dummy_value()

    return types.void(arr, row, col), codegen


# == event queue ===============================================================================
# A bucketed timing wheel (a calendar queue) that pops events in exactly the order of one
# min-heap on ``(time, item)``. That order is total up to interchangeable events (an equal
# time and item is the same event on the same object at the same instant; flags keep one
# pending per object for most kinds), so every exact priority queue pops the same sequence,
# and the run is the same.
#
# Time is cut into buckets of width ``w``: ``b(t) = trunc(t / w)``, monotone in ``t``, so an
# earlier bucket holds only earlier events. With ``c`` the bucket being served:
#
# * the **run** holds the events of buckets ``<= c``, sorted by ``(time, item)``; a pop takes
#   its first;
# * the **wheel** holds those of buckets ``c < b < c + NB``, unsorted, in slot ``b mod NB``
#   (one bucket per slot: a slot is emptied when ``c`` reaches its bucket), with a bitmap of
#   the non-empty slots;
# * the **far heap** (a 4-ary min-heap) holds those that were ``NB`` or more buckets ahead
#   when pushed (timeouts, releases, link events).
#
# When the run is empty, ``c`` moves to the earlier of the next non-empty slot's bucket and
# the far heap's top bucket; the slot's events are sorted into the run and every far event
# of a bucket ``<= c`` is inserted into it. An event pushed for a bucket ``<= c`` is inserted
# into the run (binary search, shifting the shorter side). Most events are scheduled less
# than ``NB x w`` ahead (one hop: serialisation + propagation), so a push is O(1), and a
# pop costs its share of one bucket's sort: insertion sort (the events come nearly in
# order), heapsort above ``SORT_SMALL`` events. A symmetric fabric makes clumps of events
# at one instant (ordered by item): a bucket of the 512-host permutation holds 16 events on
# average and up to a few hundred, however narrow the buckets.
#
# Storage (sized by the driver, :func:`~trainfabric.fabric.packet.driver.event_queue`):
# ``hp[r] = (time, item)`` rows, ``Q = ctr[C_QCAP]`` (the most events pending at once): the
# run in rows ``Q_OFF + ctr[C_QHEAD] + i``, ``i < ctr[C_QACT]``, the far heap's node
# ``i`` in row ``Q_OFF + Q - 1 - i`` (the two never hold more than ``Q`` together), and
# the wheel's chunks: chunk ``j`` is the 4 rows (one 64-byte line) from ``chunk_row(Q, j)``;
# row 0 holds ``1 / w``. A slot's events are a list of chunks, the newest first and only
# it partly filled. ``wl`` (int64): per slot its newest chunk ``wl[s]`` (-1: empty) and
# its event count ``wl[NB + s]``, the bitmap ``wl[2 NB : 2 NB + NB/64]`` and each chunk's
# next ``wl[2 NB + NB/64 + j]`` (a free list through the same links). Counts, the current
# bucket and the free list's head are in ``ctr``.
Q_OFF = 1  # rows before the run (row 0: 1 / w)
SORT_SMALL = 96  # a bucket of more events is heapsorted
AHEAD_1, AHEAD_2 = 6, 2  # prefetch distances in events (prefetch_ahead)
NEVER = np.int64(1) << np.int64(62)  # the bucket of an infinite (or NaN) time
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)  # count trailing zeros: x & -x times this, >> 58
_CTZ = np.zeros(64, np.int64)
for _i in range(64):
    _CTZ[(((1 << _i) * 0x03F79D71B4CB0A89) & ((1 << 64) - 1)) >> 58] = _i


@hot
def bucket(hp, t):
    """``trunc(t / w)`` clipped to ``+-NEVER`` (monotone in ``t``; NaN and +inf: NEVER)."""
    x = t * hp[0, 0]
    if not x < 4.6e18:
        return NEVER
    if x < -4.6e18:
        return -NEVER
    return np.int64(x)


@hot
def before(t1, i1, t2, i2):
    """``(t1, i1) < (t2, i2)`` lexicographically: the queue's order."""
    return t1 < t2 or (t1 == t2 and i1 < i2)


@hot
def far_push(hp, top, n, t, item):
    """Insert ``(t, item)`` into the far heap of ``n`` entries (node ``i`` in row
    ``top - i``, children ``4i + 1 .. 4i + 4``)."""
    i = n
    while i > 0:
        p = (i - 1) >> 2
        if before(hp[top - p, 0], hp[top - p, 1], t, item):
            break
        hp[top - i, 0] = hp[top - p, 0]
        hp[top - i, 1] = hp[top - p, 1]
        i = p
    hp[top - i, 0] = t
    hp[top - i, 1] = item


@hot
def far_pop(hp, top, n):
    """Remove the far heap's root (``n`` entries before)."""
    n -= 1
    if n == 0:
        return
    t = hp[top - n, 0]
    it = hp[top - n, 1]
    i = 0
    while True:
        c = 4 * i + 1
        if c >= n:
            break
        m, mt, mi = c, hp[top - c, 0], hp[top - c, 1]
        for j in range(c + 1, min(c + 4, n)):
            if before(hp[top - j, 0], hp[top - j, 1], mt, mi):
                m, mt, mi = j, hp[top - j, 0], hp[top - j, 1]
        if before(t, it, mt, mi):
            break
        hp[top - i, 0] = mt
        hp[top - i, 1] = mi
        i = m
    hp[top - i, 0] = t
    hp[top - i, 1] = it


@hot
def run_insert(hp, ctr, t, item):
    """Insert ``(t, item)`` into the sorted run after every entry before it, shifting the
    shorter side that has room (rows below the run's head are free)."""
    head, na = ctr[C_QHEAD], ctr[C_QACT]
    lo, hi = head, head + na
    while lo < hi:  # the first entry after (t, item)
        mid = (lo + hi) >> 1
        r = Q_OFF + mid
        if before(hp[r, 0], hp[r, 1], t, item):
            lo = mid + 1
        else:
            hi = mid
    room_right = head + na + ctr[C_QFAR] < ctr[C_QCAP]
    if head > 0 and (lo - head < head + na - lo or not room_right):
        for r in range(Q_OFF + head - 1, Q_OFF + lo - 1):
            hp[r, 0] = hp[r + 1, 0]
            hp[r, 1] = hp[r + 1, 1]
        ctr[C_QHEAD] = head - 1
        lo -= 1
    else:
        for r in range(Q_OFF + head + na, Q_OFF + lo, -1):
            hp[r, 0] = hp[r - 1, 0]
            hp[r, 1] = hp[r - 1, 1]
    hp[Q_OFF + lo, 0] = t
    hp[Q_OFF + lo, 1] = item
    ctr[C_QACT] = na + 1


@hot
def after_nb(t1, i1, t2, i2):
    """``(t1, i1) > (t2, i2)`` without a branch (bitwise on the comparisons: a select, not a
    jump, where the outcome is a coin toss)."""
    return (t1 > t2) | ((t1 == t2) & (i1 > i2))


@hot
def insertion_sort(hp, lo, hi):
    """Sort rows ``lo .. hi - 1`` by ``(time, item)`` (few, nearly sorted)."""
    for i in range(lo + 1, hi):
        t, it = hp[i, 0], hp[i, 1]
        j = i - 1
        while j >= lo and after_nb(hp[j, 0], hp[j, 1], t, it):
            hp[j + 1, 0] = hp[j, 0]
            hp[j + 1, 1] = hp[j, 1]
            j -= 1
        hp[j + 1, 0] = t
        hp[j + 1, 1] = it


@hot
def heapsort(hp, lo, hi):
    """Sort rows ``lo .. hi - 1`` by ``(time, item)`` in place, O(n log n): a binary
    max-heap, and Floyd's bottom-up deletion (the hole left by the root goes down to a leaf
    along the larger children, choosing each without a branch, then the last entry climbs
    back from there: about one unpredictable branch per entry)."""
    n = hi - lo
    for i in range(n // 2 - 1, -1, -1):  # heapify: sift node i down
        t, it = hp[lo + i, 0], hp[lo + i, 1]
        j = i
        while True:
            c = 2 * j + 1
            if c >= n:
                break
            if c + 1 < n:
                c += np.int64(
                    after_nb(hp[lo + c + 1, 0], hp[lo + c + 1, 1], hp[lo + c, 0], hp[lo + c, 1])
                )
            if not after_nb(hp[lo + c, 0], hp[lo + c, 1], t, it):
                break
            hp[lo + j, 0], hp[lo + j, 1] = hp[lo + c, 0], hp[lo + c, 1]
            j = c
        hp[lo + j, 0], hp[lo + j, 1] = t, it
    for m in range(n - 1, 0, -1):  # the root (largest) goes to row m
        t, it = hp[lo + m, 0], hp[lo + m, 1]
        hp[lo + m, 0], hp[lo + m, 1] = hp[lo, 0], hp[lo, 1]
        j = 0
        while 2 * j + 2 < m:  # the hole down to a leaf of the m remaining
            c = 2 * j + 1
            c += np.int64(
                after_nb(hp[lo + c + 1, 0], hp[lo + c + 1, 1], hp[lo + c, 0], hp[lo + c, 1])
            )
            hp[lo + j, 0], hp[lo + j, 1] = hp[lo + c, 0], hp[lo + c, 1]
            j = c
        if 2 * j + 1 < m:
            c = 2 * j + 1
            hp[lo + j, 0], hp[lo + j, 1] = hp[lo + c, 0], hp[lo + c, 1]
            j = c
        while j > 0:  # the former last entry climbs back
            p = (j - 1) >> 1
            if not after_nb(t, it, hp[lo + p, 0], hp[lo + p, 1]):
                break
            hp[lo + j, 0], hp[lo + j, 1] = hp[lo + p, 0], hp[lo + p, 1]
            j = p
        hp[lo + j, 0], hp[lo + j, 1] = t, it


@hot
def chunk_row(cap, j):
    """First row of wheel chunk ``j`` (64-byte aligned: ``hp`` starts on a line)."""
    return ((Q_OFF + cap + 3) & ~3) + 4 * j


@hot
def push(hp, wl, ctr, t, kind, ident):
    """Schedule event ``(t, kind, ident)``, item ``ident x 16 + kind``: into the run, the
    wheel or the far heap by its bucket (section doc). Sets ST_HEAP when ``ctr[C_QCAP]``
    events are pending."""
    n = ctr[C_HN]
    cap = ctr[C_QCAP]
    if n >= cap:
        ctr[C_STATUS] = ST_HEAP
        return
    item = float(ident * 16 + kind)
    b = bucket(hp, t)
    c = ctr[C_QCUR]
    if b <= c:
        run_insert(hp, ctr, t, item)
    elif b < c + ctr[C_QNB]:  # (b - c could overflow: c starts near -2**62)
        nb = ctr[C_QNB]
        slot = b & (nb - 1)
        fill = wl[nb + slot] & 3
        if fill == 0:  # the newest chunk is full (or there is none): a fresh one
            links = 2 * nb + (nb >> 6)
            j = ctr[C_QFREE]
            ctr[C_QFREE] = wl[links + j]
            wl[links + j] = wl[slot]
            wl[slot] = j
            wl[2 * nb + (slot >> 6)] |= np.int64(1) << (slot & 63)
        r = chunk_row(cap, wl[slot]) + fill
        hp[r, 0] = t
        hp[r, 1] = item
        wl[nb + slot] += 1
        ctr[C_QWHEEL] += 1
    else:
        far_push(hp, Q_OFF + cap - 1, ctr[C_QFAR], t, item)
        ctr[C_QFAR] += 1
    ctr[C_HN] = n + 1
    if n >= ctr[C_HMAX]:
        ctr[C_HMAX] = n + 1


@hot
def next_slot(wl, nb, s0):
    """The first non-empty wheel slot at or after ``s0``, cyclically (one exists)."""
    words = nb >> 6
    w = s0 >> 6
    x = np.uint64(wl[2 * nb + w]) & (~np.uint64(0) << np.uint64(s0 & 63))
    while x == 0:
        w = (w + 1) & (words - 1)
        x = np.uint64(wl[2 * nb + w])
    low = x & (~x + np.uint64(1))
    return (w << 6) + _CTZ[(low * _DEBRUIJN) >> np.uint64(58)]


@hot
def drain_slot(hp, wl, ctr, slot, cap):
    """Move wheel slot ``slot``'s events into the (empty) run, in push order (chunks newest
    first, each filled in order), and sort it."""
    nb = ctr[C_QNB]
    links = 2 * nb + (nb >> 6)
    k = wl[nb + slot]
    end = Q_OFF + k
    m = ((k - 1) & 3) + 1  # events in the newest chunk
    j = wl[slot]
    while True:
        r = chunk_row(cap, j)
        for i in range(m):
            hp[end - m + i, 0] = hp[r + i, 0]
            hp[end - m + i, 1] = hp[r + i, 1]
        end -= m
        m = 4
        if wl[links + j] < 0:
            break
        j = wl[links + j]
    wl[links + j] = ctr[C_QFREE]  # the slot's chunks join the free list whole
    ctr[C_QFREE] = wl[slot]
    wl[slot] = -1
    wl[nb + slot] = 0
    wl[2 * nb + (slot >> 6)] &= ~(np.int64(1) << (slot & 63))
    ctr[C_QWHEEL] -= k
    if k <= SORT_SMALL:
        insertion_sort(hp, Q_OFF, Q_OFF + k)
    else:
        heapsort(hp, Q_OFF, Q_OFF + k)
    ctr[C_QACT] = k


@hot
def advance(hp, wl, ctr):
    """The run is empty: move to the next bucket holding events and fill the run with them
    (the wheel slot's, and the far heap's up to that bucket)."""
    nb, cap = ctr[C_QNB], ctr[C_QCAP]
    c = ctr[C_QCUR]
    top = Q_OFF + cap - 1
    b_wheel = NEVER
    slot = -1
    if ctr[C_QWHEEL] > 0:
        s0 = (c + 1) & (nb - 1)
        slot = next_slot(wl, nb, s0)
        b_wheel = c + 1 + ((slot - s0) & (nb - 1))
    b_far = bucket(hp, hp[top, 0]) if ctr[C_QFAR] > 0 else NEVER
    c = min(b_wheel, b_far)
    ctr[C_QCUR] = c
    ctr[C_QHEAD] = 0
    ctr[C_QACT] = 0
    if slot >= 0 and b_wheel == c:
        drain_slot(hp, wl, ctr, slot, cap)
    while ctr[C_QFAR] > 0 and bucket(hp, hp[top, 0]) <= c:
        t, item = hp[top, 0], hp[top, 1]
        far_pop(hp, top, ctr[C_QFAR])
        ctr[C_QFAR] -= 1
        run_insert(hp, ctr, t, item)


@hot
def pop(hp, wl, ctr):
    """Remove the earliest event (``ctr[C_HN] > 0``); returns ``(t, item)``."""
    if ctr[C_QACT] == 0:
        advance(hp, wl, ctr)
    r = Q_OFF + ctr[C_QHEAD]
    ctr[C_QHEAD] += 1
    ctr[C_QACT] -= 1
    ctr[C_HN] -= 1
    return hp[r, 0], np.int64(hp[r, 1])


@hot
def peek(hp, ctr, d):
    """The item of the run's ``d``-th next event, or -1 (the run holds fewer)."""
    if ctr[C_QACT] > d:
        return np.int64(hp[Q_OFF + ctr[C_QHEAD] + d, 1])
    return np.int64(-1)


@hot
def prefetch_ahead(hp, ctr, pi, pf, li, lf, link_tier, sq):
    """Software pipelining of the next events' first reads (their records are out of the
    cache since the events were scheduled): ``AHEAD_1`` events ahead, an arrival's pool
    record or a wake's link; ``AHEAD_2`` ahead (those are in the cache by then), the
    arrival's link and the packet at the head of the waking link's queue."""
    far = peek(hp, ctr, AHEAD_1)
    if far >= 0:
        if far & 15 == K_ARRIVE:
            prefetch(pi, far >> 4, 0)
            prefetch(pi, far >> 4, N_PI - 1)
            prefetch(pf, far >> 4, 0)
        elif far & 15 == K_WAKE:
            prefetch(li, far >> 4, 0)
            prefetch(lf, far >> 4, 0)
            prefetch(lf, far >> 4, N_LF - 1)
    near = peek(hp, ctr, AHEAD_2)
    if near >= 0:
        if near & 15 == K_ARRIVE:
            lk = pi[near >> 4, P_LINK]
            if lk >= 0:
                prefetch(li, lk, 0)
                prefetch(lf, lk, 0)
                prefetch(lf, lk, N_LF - 1)
        elif near & 15 == K_WAKE:
            lk = near >> 4
            k = li[lk, L_QH1]
            if k < 0:
                k = li[lk, L_QH0]
                if k >= 0 and link_tier[lk] == 0:  # a host port: the head of its first sub-queue
                    k = sq[k, SQ_H]
            if k >= 0:
                prefetch(pi, k, 0)
                prefetch(pi, k, N_PI - 1)


# == packet pool ===============================================================================
@hot
def alloc(pi, pf, ctr, flow, seq, typ, size, dst):
    """A fresh pool record (``-1`` and ST_POOL when the pool is exhausted)."""
    k = ctr[C_FREE]
    if k < 0:
        ctr[C_STATUS] = ST_POOL
        return -1
    ctr[C_FREE] = pi[k, P_NEXT]
    ctr[C_USED] += 1
    if ctr[C_USED] > ctr[C_USEDMAX]:
        ctr[C_USEDMAX] = ctr[C_USED]
    pi[k, P_FLOW] = flow
    pi[k, P_SEQ] = seq
    pi[k, P_TYPE] = typ
    pi[k, P_SIZE] = size
    pi[k, P_LINK] = -1
    pi[k, P_INLINK] = -1
    pi[k, P_EPOCH] = 0
    pi[k, P_PLANE] = 0
    pi[k, P_DST] = dst
    pi[k, P_NEXT] = -1
    pi[k, P_EV] = 0
    pi[k, P_ECN] = 0
    pi[k, P_AUX] = -1
    pi[k, P_CUM] = -1
    pf[k, PF_T0] = -1.0
    pf[k, PF_SENT] = 0.0
    return k


@hot
def free(pi, ctr, k):
    pi[k, P_NEXT] = ctr[C_FREE]
    ctr[C_FREE] = k
    ctr[C_USED] -= 1


# == queues and links ============================================================================
@hot
def q_account(lf, lk, now):
    """Integrate the waiting bytes of link ``lk`` up to ``now`` (time-mean occupancy)."""
    occ = lf[lk, LF_QB0] + lf[lk, LF_QB1]
    lf[lk, LF_AREA] += occ * (now - lf[lk, LF_LAST])
    lf[lk, LF_LAST] = now


SQ_H, SQ_T, SQ_RR = range(3)  # sub-queue head and tail packet, next sub-queue in the round


@hot
def sq_key(pi, k, ip):
    """Sub-queue of packet ``k``: ``(flow x 3 + d) x P + plane`` with ``d`` = 0 data at the
    source NIC, 1 NACK at the receiver NIC, 2 pull in the receiver's pacer."""
    typ = pi[k, P_TYPE]
    d = 2 if typ == T_PULL else (1 if typ == T_NACK else 0)
    return (pi[k, P_FLOW] * 3 + d) * ip[I_P] + (0 if d == 2 else pi[k, P_PLANE])


@hot
def rr_push(sq, heads, row, ch, ct, key, k, pi):
    """Append packet ``k`` to sub-queue ``key``; a sub-queue that was empty joins the tail of
    the round-robin list ``heads[row, ch] .. heads[row, ct]``."""
    pi[k, P_NEXT] = -1
    if sq[key, SQ_T] < 0:
        sq[key, SQ_H] = k
        sq[key, SQ_RR] = -1
        if heads[row, ct] < 0:
            heads[row, ch] = key
        else:
            sq[heads[row, ct], SQ_RR] = key
        heads[row, ct] = key
    else:
        pi[sq[key, SQ_T], P_NEXT] = k
    sq[key, SQ_T] = k


@hot
def rr_pop(sq, heads, row, ch, ct, pi):
    """The head packet of the first sub-queue of the round, which then moves to the tail if
    it still holds packets (one packet per flow in turn); -1 when empty."""
    key = heads[row, ch]
    if key < 0:
        return -1
    k = sq[key, SQ_H]
    nxt = pi[k, P_NEXT]
    sq[key, SQ_H] = nxt
    heads[row, ch] = sq[key, SQ_RR]
    if heads[row, ch] < 0:
        heads[row, ct] = -1
    if nxt < 0:
        sq[key, SQ_T] = -1
    else:
        sq[key, SQ_RR] = -1
        if heads[row, ct] < 0:
            heads[row, ch] = key
        else:
            sq[heads[row, ct], SQ_RR] = key
        heads[row, ct] = key
    return k


@hot
def q_append(li, lf, pi, sq, ip, link_tier, lk, k, cls, now):
    """Packet ``k`` waits in class ``cls`` of link ``lk``: FIFO, except the low class of a
    host NIC, served round-robin over flows (htsim's FairPriorityQueue)."""
    q_account(lf, lk, now)
    if cls == 0 and link_tier[lk] == 0:
        rr_push(sq, li, lk, L_QH0, L_QT0, sq_key(pi, k, ip), k, pi)
    else:
        hcol = L_QH0 if cls == 0 else L_QH1
        tcol = L_QT0 if cls == 0 else L_QT1
        pi[k, P_NEXT] = -1
        if li[lk, tcol] < 0:
            li[lk, hcol] = k
        else:
            pi[li[lk, tcol], P_NEXT] = k
        li[lk, tcol] = k
    lf[lk, LF_QB0 if cls == 0 else LF_QB1] += pi[k, P_SIZE]
    occ = lf[lk, LF_QB0] + lf[lk, LF_QB1]
    if occ > lf[lk, LF_MAX]:
        lf[lk, LF_MAX] = occ


@hot
def q_pop(li, lf, pi, sq, link_tier, lk, now):
    """Head of the high class, else of the low class; -1 when empty."""
    k = li[lk, L_QH1]
    if k >= 0:
        q_account(lf, lk, now)
        li[lk, L_QH1] = pi[k, P_NEXT]
        if pi[k, P_NEXT] < 0:
            li[lk, L_QT1] = -1
        lf[lk, LF_QB1] -= pi[k, P_SIZE]
        return k
    if li[lk, L_QH0] < 0:
        return -1
    q_account(lf, lk, now)
    if link_tier[lk] == 0:
        k = rr_pop(sq, li, lk, L_QH0, L_QT0, pi)
    else:
        k = li[lk, L_QH0]
        li[lk, L_QH0] = pi[k, P_NEXT]
        if pi[k, P_NEXT] < 0:
            li[lk, L_QT0] = -1
    lf[lk, LF_QB0] -= pi[k, P_SIZE]
    return k


@hot
def transmit(lk, k, now, li, lf, pi, pf, fp, ip, ctr, hp, wl, link_tier):
    """Start serialising packet ``k`` on link ``lk`` at ``now``: ARRIVE after serialisation +
    propagation; the data packet in service still counts in its queue until it has left
    (``LF_S0`` bytes until ``LF_E0``); PFC: the packet leaves its ingress buffer (XON below
    the threshold)."""
    size = pi[k, P_SIZE]
    end = now + size * lf[lk, LF_SER]
    lf[lk, LF_BUSY] = end
    lf[lk, LF_BYTES] += size
    if pi[k, P_TYPE] == T_DATA:
        lf[lk, LF_S0] = size
        lf[lk, LF_E0] = end
    else:
        lf[lk, LF_E1] = end
    pi[k, P_LINK] = lk
    pi[k, P_EPOCH] = li[lk, L_EPOCH]
    if link_tier[lk] == 0 and pf[k, PF_T0] < 0.0:
        pf[k, PF_T0] = now
    inl = pi[k, P_INLINK]
    if inl >= 0 and ip[I_SW] == SW_LOSSLESS:
        lf[inl, LF_ING] -= size
        if li[inl, L_PFC] == 1 and lf[inl, LF_ING] <= fp[F_XON]:
            li[inl, L_PFC] = 0
            push(hp, wl, ctr, now + fp[F_PROP], K_POFF, inl)
    pi[k, P_INLINK] = -1
    push(hp, wl, ctr, end + fp[F_PROP], K_ARRIVE, k)


@once
def wake(lk, now, li, lf, pi, pf, fp, ip, ctr, hp, wl, link_tier, sq):
    """The link is free (or resumed): serialise the next queued packet."""
    li[lk, L_WAKE] = 0
    if li[lk, L_PAUSED] == 1 or lf[lk, LF_BUSY] > now:
        if li[lk, L_PAUSED] == 0:
            li[lk, L_WAKE] = 1
            push(hp, wl, ctr, lf[lk, LF_BUSY], K_WAKE, lk)
        return
    k = q_pop(li, lf, pi, sq, link_tier, lk, now)
    if k < 0:
        return
    transmit(lk, k, now, li, lf, pi, pf, fp, ip, ctr, hp, wl, link_tier)
    if li[lk, L_QH0] >= 0 or li[lk, L_QH1] >= 0:
        li[lk, L_WAKE] = 1
        push(hp, wl, ctr, lf[lk, LF_BUSY], K_WAKE, lk)


@hot
def swap_records(pi, pf, a, b):
    """Exchange the contents of pool records ``a`` and ``b`` (not their queue links)."""
    for c in range(N_PI):
        if c != P_NEXT:
            pi[a, c], pi[b, c] = pi[b, c], pi[a, c]
    for c in range(N_PF):
        pf[a, c], pf[b, c] = pf[b, c], pf[a, c]


@hot
def enqueue(lk, k, now, li, lf, pi, pf, fp, ip, ctr, hp, wl, link_tier, rng, sq):
    """Packet ``k`` joins the output queue of link ``lk`` (module doc of the package: ECN,
    drop tail, trimming, PFC ingress accounting happen in the caller and here)."""
    typ = pi[k, P_TYPE]
    cls = 0 if (typ == T_DATA or (typ == T_NACK and link_tier[lk] == 0)) else 1
    if link_tier[lk] != 0:  # a switch port
        if cls == 0:
            low = lf[lk, LF_QB0] + (lf[lk, LF_S0] if lf[lk, LF_E0] > now else 0.0)
            kmin, kmax = fp[F_KMIN], fp[F_KMAX]
            if low >= kmin and (low >= kmax or uniform(rng) < (low - kmin) / (kmax - kmin)):
                if pi[k, P_ECN] == 0:
                    ctr[C_ECN] += 1
                pi[k, P_ECN] = 1
            if ip[I_SW] != SW_LOSSLESS and low + pi[k, P_SIZE] > fp[F_QCAP]:
                if ip[I_SW] == SW_LOSSY:
                    ctr[C_DROP] += 1
                    free(pi, ctr, k)
                    return
                tail = li[lk, L_QT0]
                if tail >= 0 and uniform(rng) < 0.5:  # trim the tail, the arrival takes its place
                    swap_records(pi, pf, tail, k)
                    lf[lk, LF_QB0] += pi[tail, P_SIZE] - pi[k, P_SIZE]
                pi[k, P_TYPE] = T_HDR
                pi[k, P_SIZE] = ip[I_HDR]
                ctr[C_TRIM] += 1
                cls = 1
        if cls == 1:
            ahead = (lf[lk, LF_E1] - now) / lf[lk, LF_SER]  # committed headers (below)
            high = lf[lk, LF_QB1] + (ahead if ahead > 0.0 else 0.0)
            if ip[I_SW] != SW_LOSSLESS and high + pi[k, P_SIZE] > 2.0 * fp[F_QCAP]:
                ctr[C_DROP] += 1
                free(pi, ctr, k)
                return
    if li[lk, L_PAUSED] == 0:
        idle = li[lk, L_QH0] < 0 and li[lk, L_QH1] < 0 and lf[lk, LF_BUSY] <= now
        if idle or (cls == 1 and li[lk, L_QH1] < 0 and ip[I_SW] != SW_LOSSLESS):
            # idle: at once. A header first in the strict-priority class will start when the
            # port frees whatever comes later, so it is committed now (no WAKE event); not
            # under PFC, which may pause the port before that
            transmit(
                lk, k, max(now, lf[lk, LF_BUSY]), li, lf, pi, pf, fp, ip, ctr, hp, wl, link_tier
            )
            return
    q_append(li, lf, pi, sq, ip, link_tier, lk, k, cls, now)
    if li[lk, L_WAKE] == 0 and li[lk, L_PAUSED] == 0:
        li[lk, L_WAKE] = 1
        push(hp, wl, ctr, max(now, lf[lk, LF_BUSY]), K_WAKE, lk)


# == load balancing ============================================================================
@hot
def up_ok(p, a, b, j, leaf_up, spine_down, view, v):
    """Uplink ``j`` of leaf ``a`` (plane ``p``) is up in view ``v`` and its spine has an up
    cable into leaf ``b``."""
    if view[v, leaf_up[p, a, j]] == 0:
        return False
    s = j % spine_down.shape[1]
    for c in range(spine_down.shape[3]):  # noqa: SIM110
        if view[v, spine_down[p, s, b, c]] != 0:
            return True
    return False


@hot
def occupancy(lf, lk, now, fp, ip):
    """Adaptive routing's load signal of port ``lk``: bytes queued plus the rest of the packet
    being serialised, or with ``adaptive_levels`` the number of thresholds it reaches."""
    serv = lf[lk, LF_BUSY] - now
    occ = lf[lk, LF_QB0] + lf[lk, LF_QB1] + (serv / lf[lk, LF_SER] if serv > 0.0 else 0.0)
    if ip[I_NLEV] == 0:
        return occ
    level = 0.0
    for i in range(ip[I_NLEV]):
        if occ >= fp[F_LEV0 + i]:
            level = i + 1.0
    return level


@once
def pick_uplink(p, a, b, ev, mode, now, leaf_up, spine_down, view, v, healthy, lf, rng, fp, ip):
    """Leaf ``a``'s uplink for a packet to leaf ``b``: by entropy (ecmp, flowlet, pinning,
    spray: ``ev mod U`` when it is eligible, else the ``ev``-th eligible one) or the least
    occupied eligible one (adaptive, random ties). -1: none eligible."""
    U = leaf_up.shape[2]
    if mode == M_ADAPTIVE:
        best = -1
        best_occ = 0.0
        start = randint(rng, U)
        for i in range(U):
            j = (start + i) % U
            if not healthy and not up_ok(p, a, b, j, leaf_up, spine_down, view, v):
                continue
            o = occupancy(lf, leaf_up[p, a, j], now, fp, ip)
            if best < 0 or o < best_occ:
                best, best_occ = j, o
        return best
    j = np.int64(ev % np.uint64(U))
    if healthy or up_ok(p, a, b, j, leaf_up, spine_down, view, v):
        return j
    cnt = 0
    for i in range(U):
        if up_ok(p, a, b, i, leaf_up, spine_down, view, v):
            cnt += 1
    if cnt == 0:
        return -1
    r = np.int64(mix(ev, 77) % np.uint64(cnt))
    for i in range(U):
        if up_ok(p, a, b, i, leaf_up, spine_down, view, v):
            if r == 0:
                return i
            r -= 1
    return -1


@once
def pick_cable(p, s, b, ev, mode, now, spine_down, view, v, lf, rng, fp, ip):
    """Spine ``s``'s cable into leaf ``b`` (entropy, or least occupied for adaptive)."""
    C = spine_down.shape[3]
    if C == 1:
        return spine_down[p, s, b, 0]
    best = -1
    best_occ = 0.0
    start = randint(rng, C) if mode == M_ADAPTIVE else np.int64(ev % np.uint64(C))
    for i in range(C):
        c = (start + i) % C
        lk = spine_down[p, s, b, c]
        if view[v, lk] == 0:
            continue
        if mode != M_ADAPTIVE:
            return lk
        o = occupancy(lf, lk, now, fp, ip)
        if best < 0 or o < best_occ:
            best, best_occ = lk, o
    return best


@once
def route(k, node, now, pi, lf, fp, ip, ctr, tp, view, rng):
    """The output link of packet ``k`` at switch ``node``; -1 when there is no route."""
    host_down, host_leaf, leaf_up, spine_down, sw_role, sw_idx, sw_plane = tp[:7]
    H = ip[I_H]
    sw = node - H
    p = sw_plane[sw]
    dst = pi[k, P_DST]
    b = host_leaf[dst]
    ev = np.uint64(pi[k, P_EV])
    mode = ip[I_MODE]
    v = ip[I_VFABRIC]
    healthy = ctr[C_DOWN0 + v] == 0
    if ip[I_FAT] == 1:
        return route_3tier(k, sw, dst, b, ev, mode, now, pi, lf, fp, ip, tp, view, v, healthy, rng)
    if sw_role[sw] == 0:
        a = sw_idx[sw]
        if a == b:
            return host_down[p, dst]
        e2 = ev if mode == M_SPRAY else mix(ev, node)
        j = pick_uplink(
            p, a, b, e2, mode, now, leaf_up, spine_down, view, v, healthy, lf, rng, fp, ip
        )
        return -1 if j < 0 else leaf_up[p, a, j]
    s = sw_idx[sw]
    e2 = ev // np.uint64(leaf_up.shape[2]) if mode == M_SPRAY else mix(ev, node)
    return pick_cable(p, s, b, e2, mode, now, spine_down, view, v, lf, rng, fp, ip)


@hot
def core_ok(j, m, q, qb, ib, u, agg_up, core_down, agg_down, view, v):
    """Agg ``j`` of pod ``q`` reaches edge ``ib`` of pod ``qb`` over its uplink ``m``."""
    ua = agg_up.shape[1]
    return (
        view[v, agg_up[q * u + j, m]] != 0
        and view[v, core_down[j * ua + m, qb]] != 0
        and view[v, agg_down[qb * u + j, ib]] != 0
    )


@hot
def agg_ok(e, j, qb, ib, e_pod, u, edge_up, agg_up, core_down, agg_down, view, v):
    """Edge ``e`` reaches edge ``ib`` of pod ``qb`` through its agg ``j``."""
    if view[v, edge_up[e, j]] == 0:
        return False
    q = e // e_pod
    if q == qb:
        return view[v, agg_down[q * u + j, ib]] != 0
    for m in range(agg_up.shape[1]):  # noqa: SIM110
        if core_ok(j, m, q, qb, ib, u, agg_up, core_down, agg_down, view, v):
            return True
    return False


@hot
def route_3tier(k, sw, dst, b, ev, mode, now, pi, lf, fp, ip, tp, view, v, healthy, rng):
    """Fat-tree hop: an edge picks an agg (``j``), an agg of the source pod a core uplink
    (``m``), a core the cable with the same uplink index into the destination pod (as the
    flow engine's paths), then down. Spray: ``j = path mod u``, ``m = (path div u) mod ua``
    (when eligible, else the ``path``-th eligible); ecmp-like modes hash; adaptive: the least
    occupied eligible port."""
    host_down, sw_role, sw_idx = tp[0], tp[4], tp[5]
    edge_up, agg_down, agg_up, core_down, up_slot = tp[7], tp[8], tp[9], tp[10], tp[11]
    e_pod = agg_down.shape[1]
    u = edge_up.shape[1]
    ua = agg_up.shape[1]
    qb, ib = b // e_pod, b % e_pod
    role = sw_role[sw]
    idx = sw_idx[sw]
    if role == 2:  # core: the cable into the destination pod with the incoming uplink's index
        lk = core_down[up_slot[pi[k, P_LINK]], qb]
        return lk if view[v, lk] != 0 else -1
    if role == 0:
        e = idx
        if e == b:
            return host_down[0, dst]
        n_opt = u
        want = (
            np.int64(ev % np.uint64(u)) if mode == M_SPRAY else np.int64(mix(ev, sw) % np.uint64(u))
        )
    else:
        a = idx
        q, j = a // u, a % u
        if q == qb:
            lk = agg_down[a, ib]
            return lk if view[v, lk] != 0 else -1
        n_opt = ua
        if mode == M_SPRAY:
            want = np.int64((ev // np.uint64(u)) % np.uint64(ua))
        else:
            want = np.int64(mix(ev, sw) % np.uint64(ua))
    best = -1
    best_occ = 0.0
    cnt = 0
    start = randint(rng, n_opt) if mode == M_ADAPTIVE else want
    for i in range(n_opt):
        c = (start + i) % n_opt
        if role == 0:
            ok = healthy or agg_ok(
                idx, c, qb, ib, e_pod, u, edge_up, agg_up, core_down, agg_down, view, v
            )
            lk = edge_up[idx, c]
        else:
            ok = healthy or core_ok(j, c, q, qb, ib, u, agg_up, core_down, agg_down, view, v)
            lk = agg_up[idx, c]
        if not ok:
            continue
        if mode != M_ADAPTIVE:
            return lk  # the wanted port, or the next eligible one after it
        o = occupancy(lf, lk, now, fp, ip)
        if best < 0 or o < best_occ:
            best, best_occ = lk, o
        cnt += 1
    return best


@hot
def plane_usable(p, src, dst, host_up, host_down, view, ip):
    return view[ip[I_VPLANE], host_up[p, src]] != 0 and view[ip[I_VREMOTE], host_down[p, dst]] != 0


@hot
def pick_plane(src, dst, ev, now, host_up, host_down, view, ip, lf, rng, fp):
    """The NIC's plane for a packet (module doc of the package); -1 when none is usable."""
    P = ip[I_P]
    if P == 1:
        return 0
    mode = ip[I_MODE]
    cnt = 0
    for p in range(P):
        if plane_usable(p, src, dst, host_up, host_down, view, ip):
            cnt += 1
    if cnt == 0:
        return -1
    if mode == M_ADAPTIVE:
        best = -1
        best_occ = 0.0
        start = randint(rng, P)
        for i in range(P):
            p = (start + i) % P
            if plane_usable(p, src, dst, host_up, host_down, view, ip):
                o = occupancy(lf, host_up[p, src], now, fp, ip)
                if best < 0 or o < best_occ:
                    best, best_occ = p, o
        return best
    r = np.int64(ev % np.uint64(cnt))
    for p in range(P):
        if plane_usable(p, src, dst, host_up, host_down, view, ip):
            if r == 0:
                return p
            r -= 1
    return -1


# == flow table columns (fl: int64) ===============================================================
FL_SRC, FL_DST, FL_NPK, FL_LAST, FL_OFF, FL_CONN, FL_CHAN, FL_JOB, N_FL = range(9)


# == sender ====================================================================================
@hot
def retired(f, path, now, ret_path, ret_until):
    for i in range(ret_path.shape[1]):  # noqa: SIM110
        if ret_path[f, i] == path and ret_until[f, i] > now:
            return True
    return False


@hot
def retire(f, path, now, fp, ret_path, ret_until):
    """MRC-like: the path of a trimmed or lost packet is avoided for ``path_retire_s``."""
    if fp[F_RETIRE] <= 0.0 or path < 0 or ret_path.shape[0] <= f:
        return
    slot = 0
    for i in range(ret_path.shape[1]):
        if ret_path[f, i] == path:
            slot = i
            break
        if ret_until[f, i] < ret_until[f, slot]:
            slot = i
    ret_path[f, slot] = path
    ret_until[f, slot] = now + fp[F_RETIRE]


@hot
def next_spray_path(f, now, fi, rng, ret_path, ret_until):
    """Next path of the flow's current cyclic permutation ``(a k + b) mod n`` (fresh random
    ``a`` coprime to ``n`` and ``b`` every cycle, as htsim's reshuffle per cycle), skipping
    retired paths (at most one cycle of tries)."""
    n = fi[f, FI_NPATH]
    path = 0
    for _ in range(n):
        if fi[f, FI_PK] >= n or fi[f, FI_PA] == 0:
            a = 1 + randint(rng, max(n - 1, 1))
            while gcd(a, n) != 1:
                a = 1 + randint(rng, max(n - 1, 1))
            fi[f, FI_PA] = a
            fi[f, FI_PB] = randint(rng, n)
            fi[f, FI_PK] = 0
        path = (fi[f, FI_PA] * fi[f, FI_PK] + fi[f, FI_PB]) % n
        fi[f, FI_PK] += 1
        if not retired(f, path, now, ret_path, ret_until):
            return path
    return path


@hot
def arm_rto(f, now, fi, ff, fp, ctr, hp, wl):
    if fi[f, FI_RTOPEND] == 0:
        fi[f, FI_RTOPEND] = 1
        ff[f, FF_RTODL] = now + fp[F_RTO]
        push(hp, wl, ctr, now + fp[F_RTO], K_RTO, f)


@hot
def sendable(f, fi, ff, fl, ip, sst, rqn):
    """The next sequence the sender may send now (a queued retransmission first), or -1."""
    if ip[I_MODE] == M_PINNING and fi[f, FI_TARGET] >= 0 and fi[f, FI_PINOUT] > 0:
        return -1  # drain barrier: the old plane still has packets outstanding
    if ip[I_TR] == TR_NDP:
        if fi[f, FI_CRED] <= 0:
            return -1
    elif fi[f, FI_INFL] * ip[I_MTU] >= ff[f, FF_CWND]:
        return -1
    off = fl[f, FL_OFF]
    while fi[f, FI_RQH] >= 0:
        g = fi[f, FI_RQH]
        if sst[g] == 3:
            return g - off
        fi[f, FI_RQH] = rqn[g]  # acked meanwhile: skip
        if fi[f, FI_RQH] < 0:
            fi[f, FI_RQT] = -1
    if fi[f, FI_SNDNXT] < fl[f, FL_NPK]:
        return fi[f, FI_SNDNXT]
    return -1


@hot
def pin_check(f, now, fi, ff, fl, fp, ip, ctr, view, host_up, host_down, congested):
    """Pinning: move the flow to another plane when its plane is down in the software view,
    or on congestion (``congested``) at most once per software reaction time; the move
    happens after the drain barrier (:func:`resolve`)."""
    P = ip[I_P]
    if ip[I_MODE] != M_PINNING or P == 1 or fi[f, FI_TARGET] >= 0:
        return
    src, dst = fl[f, FL_SRC], fl[f, FL_DST]
    p0 = fi[f, FI_PLANE]
    ok = plane_usable(p0, src, dst, host_up, host_down, view, ip)
    if ok and not (congested and ip[I_MIGRATE] == 1):
        return
    if ok and now - ff[f, FF_LASTMIG] < fp[F_REACT1]:
        return
    for i in range(1, P):
        p = (p0 + i) % P
        if plane_usable(p, src, dst, host_up, host_down, view, ip):
            fi[f, FI_TARGET] = p
            ff[f, FF_LASTMIG] = now
            ctr[C_MIGR] += 1
            if fi[f, FI_PINOUT] <= 0:
                fi[f, FI_PLANE] = p
                fi[f, FI_TARGET] = -1
                fi[f, FI_PINOUT] = 0
            return


@hot
def send_data(f, s, now, st, fl, fle, ctr, fp, ip, rng):
    """Packet ``s`` of flow ``f`` goes to the source NIC (plane and entropy by mode)."""
    fi, ff, sst, stime, rqn, spath = st.fi, st.ff, st.sst, st.stime, st.rqn, st.spath
    li, lf, pi, pf, hp = st.li, st.lf, st.pi, st.pf, st.hp
    wl = st.wl
    view, ret_path, ret_until = st.views, st.ret_path, st.ret_until
    conn_last, conn_fl = st.conn_last, st.conn_fl
    link_tier, host_up, host_down = st.link_tier, st.host_up, st.host_down
    src, dst, npk, off, conn = fl[f, 0], fl[f, 1], fl[f, 2], fl[f, 4], fl[f, 5]
    g = off + s
    payload = fl[f, FL_LAST] if s == npk - 1 else ip[I_MTU]
    k = alloc(pi, pf, ctr, f, s, T_DATA, payload + ip[I_HDR], dst)
    if k < 0:
        return
    if sst[g] == 3:
        fi[f, FI_RQH] = rqn[g]
        if rqn[g] < 0:
            fi[f, FI_RQT] = -1
        ctr[C_RTX] += 1
    else:
        fi[f, FI_SNDNXT] = s + 1
    mode = ip[I_MODE]
    ent = np.uint64(fle[f])
    path = -1
    if mode == M_SPRAY:
        path = next_spray_path(f, now, fi, rng, ret_path, ret_until)
        P = np.uint64(ip[I_P])
        plane = pick_plane(
            src, dst, np.uint64(path) % P, now, host_up, host_down, view, ip, lf, rng, fp
        )
        ev = np.uint64(path) // P
    elif mode == M_ADAPTIVE:
        ev = rand(rng)
        plane = pick_plane(src, dst, ev, now, host_up, host_down, view, ip, lf, rng, fp)
    elif mode == M_FLOWLET:
        if now - conn_last[conn] > fp[F_FLOWLET]:
            conn_fl[conn] += 1
        conn_last[conn] = now
        ev = mix(ent, conn_fl[conn])
        plane = pick_plane(src, dst, mix(ev, 1), now, host_up, host_down, view, ip, lf, rng, fp)
    elif mode == M_PINNING:
        ev = ent
        plane = fi[f, FI_PLANE]
        if not plane_usable(plane, src, dst, host_up, host_down, view, ip):
            plane = -1
    else:
        ev = ent
        plane = pick_plane(src, dst, mix(ev, 1), now, host_up, host_down, view, ip, lf, rng, fp)
    sst[g] = 1
    stime[g] = now
    spath[g] = path if mode == M_SPRAY else plane
    fi[f, FI_INFL] += 1
    if mode == M_PINNING:
        fi[f, FI_PINOUT] += 1
    if ip[I_TR] == TR_NDP:
        fi[f, FI_CRED] -= 1
    ctr[C_SENT] += 1
    pi[k, P_EV] = np.int64(ev)
    if plane < 0:  # no usable plane: the packet is lost at the NIC
        ctr[C_NOROUTE] += 1
        ctr[C_DROP] += 1
        ff[f, FF_LOST] += payload
        free(pi, ctr, k)
    else:
        pi[k, P_PLANE] = plane
        pf[k, PF_SENT] = now
        enqueue(
            host_up[plane, src], k, now, li, lf, pi, pf, fp, ip, ctr, hp, wl, link_tier, rng, st.sq
        )
    arm_rto(f, now, fi, ff, fp, ctr, hp, wl)


@hot
def try_send(f, now, st, fl, fle, ctr, fp, ip, rng):
    """Send while the transport allows (NDP credits, or the DCTCP window)."""
    fi, ff, sst, rqn, view = st.fi, st.ff, st.sst, st.rqn, st.views
    pin_check(f, now, fi, ff, fl, fp, ip, ctr, view, st.host_up, st.host_down, False)
    while ctr[C_STATUS] == ST_OK:
        s = sendable(f, fi, ff, fl, ip, sst, rqn)
        if s < 0:
            return
        send_data(f, s, now, st, fl, fle, ctr, fp, ip, rng)


@hot
def resolve(f, g, fi, ip, spath):
    """A packet of flow ``f`` stopped being outstanding (acked, nacked or timed out); the
    pinning drain barrier completes when the old plane has none left."""
    fi[f, FI_INFL] -= 1
    if ip[I_MODE] == M_PINNING and spath[g] == fi[f, FI_PLANE]:
        fi[f, FI_PINOUT] -= 1
        if fi[f, FI_PINOUT] <= 0 and fi[f, FI_TARGET] >= 0:
            fi[f, FI_PLANE] = fi[f, FI_TARGET]
            fi[f, FI_TARGET] = -1
            fi[f, FI_PINOUT] = 0


@hot
def queue_rtx(f, g, fi, sst, rqn):
    sst[g] = 3
    rqn[g] = -1
    if fi[f, FI_RQT] < 0:
        fi[f, FI_RQH] = g
    else:
        rqn[fi[f, FI_RQT]] = g
    fi[f, FI_RQT] = g


@hot
def dctcp_ack(f, marked, fi, ff, fp, ip):
    """DCTCP window law per ACK (transport doc): +MTU^2/cwnd per unmarked ACK; once per
    window of ACKs ``alpha <- (1 - g) alpha + g F`` and, if any was marked,
    ``cwnd <- cwnd (1 - alpha / 2)``; ``MTU <= cwnd <= max_window``."""
    mtu = float(ip[I_MTU])
    fi[f, FI_ACKW] += 1
    if marked:
        fi[f, FI_MARKW] += 1
    else:
        ff[f, FF_CWND] = min(ff[f, FF_CWND] + mtu * mtu / ff[f, FF_CWND], ip[I_MAXW] * mtu)
    if fi[f, FI_ACKW] >= fi[f, FI_WINEND]:
        gain = fp[F_GAIN]
        frac = fi[f, FI_MARKW] / fi[f, FI_ACKW]
        ff[f, FF_ALPHA] = (1.0 - gain) * ff[f, FF_ALPHA] + gain * frac
        if fi[f, FI_MARKW] > 0:
            ff[f, FF_CWND] = max(mtu, ff[f, FF_CWND] * (1.0 - ff[f, FF_ALPHA] / 2.0))
        fi[f, FI_WINEND] = max(1, np.int64(ff[f, FF_CWND] / mtu))
        fi[f, FI_ACKW] = 0
        fi[f, FI_MARKW] = 0


@hot
def ack_one(f, g, fi, ff, fp, ip, sst, spath, marked):
    """Selective ACK of global sequence ``g``."""
    state = sst[g]
    if state != 1 and state != 3:
        return
    if state == 1:
        resolve(f, g, fi, ip, spath)
    sst[g] = 2
    if ip[I_TR] == TR_DCTCP:
        dctcp_ack(f, marked, fi, ff, fp, ip)


@hot
def loss_signal(f, g, now, st, fl, fp, ip, ctr):
    """Packet ``g`` is known lost or trimmed: queue it, retire its path (spray), DCTCP
    halves the window once per window, pinning may migrate."""
    fi, ff, sst, rqn, spath = st.fi, st.ff, st.sst, st.rqn, st.spath
    if sst[g] != 1:
        return
    resolve(f, g, fi, ip, spath)
    queue_rtx(f, g, fi, sst, rqn)
    if ip[I_MODE] == M_SPRAY:
        retire(f, spath[g], now, fp, st.ret_path, st.ret_until)
    if ip[I_TR] == TR_DCTCP and g - fl[f, FL_OFF] >= fi[f, FI_CUTG]:
        ff[f, FF_CWND] = max(float(ip[I_MTU]), ff[f, FF_CWND] / 2.0)
        fi[f, FI_CUTG] = fi[f, FI_SNDNXT]
    pin_check(f, now, fi, ff, fl, fp, ip, ctr, st.views, st.host_up, st.host_down, True)


@once
def sender_ctrl(k, now, st, fl, fle, ctr, fp, ip, rng):
    """An ACK, NACK or PULL reached the flow's source."""
    fi, ff, sst, spath, pi = st.fi, st.ff, st.sst, st.spath, st.pi
    f = pi[k, P_FLOW]
    off = fl[f, FL_OFF]
    typ = pi[k, P_TYPE]
    if typ == T_ACK:
        ack_one(f, off + pi[k, P_SEQ], fi, ff, fp, ip, sst, spath, pi[k, P_ECN] == 1)
        cum = pi[k, P_CUM]
        una = fi[f, FI_SNDUNA]
        while una < cum:
            ack_one(f, off + una, fi, ff, fp, ip, sst, spath, False)
            una += 1
        while una < fi[f, FI_SNDNXT] and sst[off + una] == 2:
            una += 1
        if una > fi[f, FI_SNDUNA]:
            ff[f, FF_RTODL] = now + fp[F_RTO]
        fi[f, FI_SNDUNA] = una
    elif typ == T_NACK:
        loss_signal(f, off + pi[k, P_SEQ], now, st, fl, fp, ip, ctr)
    aux = pi[k, P_AUX]
    if aux > fi[f, FI_PULLSEEN]:
        fi[f, FI_CRED] += aux - fi[f, FI_PULLSEEN]
        fi[f, FI_PULLSEEN] = aux
    free(pi, ctr, k)
    if fi[f, FI_SNDUNA] >= fl[f, FL_NPK] and fi[f, FI_SDONE] == 0:
        fi[f, FI_SDONE] = 1
        ff[f, FF_ACKED] = now
        ctr[C_SDONE] += 1
        return True
    try_send(f, now, st, fl, fle, ctr, fp, ip, rng)
    return False


@once
def rto_fire(f, now, st, fl, fle, ctr, fp, ip, rng):
    """The retransmission timer: packets outstanding for ``rto_s`` without any ACK progress
    are declared lost and resent (NDP: with a credit each; DCTCP: window to one MTU)."""
    fi, ff, sst, stime = st.fi, st.ff, st.sst, st.stime
    hp = st.hp
    wl = st.wl
    fi[f, FI_RTOPEND] = 0
    if fi[f, FI_SDONE] == 1 or fi[f, FI_INFL] <= 0:
        return
    if now < ff[f, FF_RTODL]:
        fi[f, FI_RTOPEND] = 1
        push(hp, wl, ctr, ff[f, FF_RTODL], K_RTO, f)
        return
    off = fl[f, FL_OFF]
    n = 0
    for s in range(fi[f, FI_SNDUNA], fi[f, FI_SNDNXT]):
        g = off + s
        if sst[g] == 1 and stime[g] <= now - fp[F_RTO] * (1.0 - 1e-9):
            loss_signal(f, g, now, st, fl, fp, ip, ctr)
            n += 1
    if n > 0:
        ctr[C_TIMEOUTS] += 1
        if ip[I_TR] == TR_NDP:
            fi[f, FI_CRED] += n
        else:
            ff[f, FF_CWND] = float(ip[I_MTU])
    ff[f, FF_RTODL] = now + fp[F_RTO]
    try_send(f, now, st, fl, fle, ctr, fp, ip, rng)
    arm_rto(f, now, fi, ff, fp, ctr, hp, wl)


# == receiver ==================================================================================
@hot
def ctrl_send(k, now, st, fl, fle, fp, ip, ctr, rng):
    """Control packet ``k`` leaves host ``pi[k, P_DST]``'s peer: plane and entropy by mode
    (spray and adaptive: a random path; the others hash the connection for the reverse
    direction)."""
    fi, li, lf, pi, pf = st.fi, st.li, st.lf, st.pi, st.pf
    hp, view, link_tier, host_up, host_down = (
        st.hp,
        st.views,
        st.link_tier,
        st.host_up,
        st.host_down,
    )
    wl = st.wl
    f = pi[k, P_FLOW]
    src = fl[f, FL_DST]
    dst = fl[f, FL_SRC]
    mode = ip[I_MODE]
    if mode == M_SPRAY or mode == M_ADAPTIVE:  # noqa: SIM108, SIM109 (numba)
        ev = rand(rng)
    else:
        ev = mix(np.uint64(fle[f]), 0xACC)
    if mode == M_PINNING:
        plane = fi[f, FI_PLANE]
        if not plane_usable(plane, src, dst, host_up, host_down, view, ip):
            plane = pick_plane(src, dst, mix(ev, 1), now, host_up, host_down, view, ip, lf, rng, fp)
    else:
        plane = pick_plane(src, dst, mix(ev, 1), now, host_up, host_down, view, ip, lf, rng, fp)
    ctr[C_CTRL] += 1
    if plane < 0:
        ctr[C_NOROUTE] += 1
        ctr[C_DROP] += 1
        free(pi, ctr, k)
        return
    pi[k, P_EV] = np.int64(ev)
    pi[k, P_PLANE] = plane
    enqueue(host_up[plane, src], k, now, li, lf, pi, pf, fp, ip, ctr, hp, wl, link_tier, rng, st.sq)


@once
def issue_pull(f, now, st, fl, fp, ip, ctr):
    """NDP receiver: one pull per arrival. Carried by the ACK/NACK itself when the host's
    pacer is idle and its last pull left ``pace`` ago (returns the pull number), else a
    PULL packet waits in the pacer, served round-robin over flows (returns -1)."""
    fi, pi, pf, hp, hq, hfq = st.fi, st.pi, st.pf, st.hp, st.hq, st.hfq
    wl = st.wl
    h = fl[f, FL_DST]
    if hq[h, H_PQH] < 0 and now >= hfq[h, HF_NEXT]:
        fi[f, FI_PULLNO] += 1
        hfq[h, HF_NEXT] = now + fp[F_PACE]
        return fi[f, FI_PULLNO]
    k = alloc(pi, pf, ctr, f, -1, T_PULL, ip[I_HDR], fl[f, FL_SRC])
    if k < 0:
        return -1
    rr_push(st.sq, hq, h, H_PQH, H_PQT, sq_key(pi, k, ip), k, pi)
    if hq[h, H_ARMED] == 0:
        hq[h, H_ARMED] = 1
        push(hp, wl, ctr, max(now, hfq[h, HF_NEXT]), K_PACE, h)
    return -1


@once
def pace(h, now, st, fl, fle, fp, ip, ctr, rng):
    """Host ``h``'s pull pacer releases the next pull (pulls of flows already complete at
    this receiver are dropped without using a slot)."""
    fi, pi, hp, hq, hfq = st.fi, st.pi, st.hp, st.hq, st.hfq
    wl = st.wl
    hq[h, H_ARMED] = 0
    while hq[h, H_PQH] >= 0:
        k = rr_pop(st.sq, hq, h, H_PQH, H_PQT, pi)
        f = pi[k, P_FLOW]
        if fi[f, FI_RDONE] == 1:
            free(pi, ctr, k)
            continue
        fi[f, FI_PULLNO] += 1
        pi[k, P_AUX] = fi[f, FI_PULLNO]
        hfq[h, HF_NEXT] = now + fp[F_PACE]
        ctrl_send(k, now, st, fl, fle, fp, ip, ctr, rng)
        break
    if hq[h, H_PQH] >= 0:
        hq[h, H_ARMED] = 1
        push(hp, wl, ctr, hfq[h, HF_NEXT], K_PACE, h)


@hot
def respond(f, s, typ, marked, pull, now, st, fl, fle, fp, ip, ctr, rng):
    """The receiver answers: an ACK (selective ``s``, cumulative ``rcv_next``, ECN echo) or a
    NACK of ``s``; with ``pull`` (NDP, one per arrival) it carries a pull when the pacer
    allows, else a separate PULL waits in the pacer."""
    fi, pi, pf = st.fi, st.pi, st.pf
    aux = issue_pull(f, now, st, fl, fp, ip, ctr) if pull else -1
    k = alloc(pi, pf, ctr, f, s, typ, ip[I_HDR], fl[f, FL_SRC])
    if k < 0:
        return
    pi[k, P_AUX] = aux
    pi[k, P_CUM] = fi[f, FI_RCVNXT]
    pi[k, P_ECN] = 1 if marked else 0
    ctrl_send(k, now, st, fl, fle, fp, ip, ctr, rng)


@hot
def release_successors(f, now, fi, ff, flf, succ_ptr, succ, ctr, hp, wl):
    """Flow ``f`` completed: its dependants start at ``max(release, finishes) + delay``."""
    for i in range(succ_ptr[f], succ_ptr[f + 1]):
        q = succ[i]
        fi[q, FI_PENDING] -= 1
        ff[q, FF_READY] = max(ff[q, FF_READY], now)
        if fi[q, FI_PENDING] == 0:
            push(hp, wl, ctr, max(ff[q, FF_READY], flf[q, 0]) + flf[q, 1], K_RELEASE, q)


@once
def receive(k, now, st, fl, fle, fp, ip, ctr, rng, lat):
    """A data packet or a trimmed header reached its receiver; returns the payload bytes
    delivered in order by this arrival (reordering buffer: ``rcv_next`` is the first
    missing sequence, packets above it wait; the buffer depth is their count)."""
    fi, pi, pf, got = st.fi, st.pi, st.pf, st.got
    f = pi[k, P_FLOW]
    s = pi[k, P_SEQ]
    off, npk = fl[f, FL_OFF], fl[f, FL_NPK]
    g = off + s
    ndp = ip[I_TR] == TR_NDP
    if pi[k, P_TYPE] == T_HDR:
        free(pi, ctr, k)
        if got[g] == 0:
            got[g] = 2
        respond(f, s, T_NACK, False, ndp, now, st, fl, fle, fp, ip, ctr, rng)
        return 0.0
    n = ctr[C_NLAT]
    x = now - pf[k, PF_T0]
    if n < lat.size:
        lat[n] = x
    else:
        j = randint(rng, n + 1)
        if j < lat.size:
            lat[j] = x
    ctr[C_NLAT] = n + 1
    marked = pi[k, P_ECN] == 1
    free(pi, ctr, k)
    delivered = 0.0
    rn = fi[f, FI_RCVNXT]
    if got[g] == 1:
        ctr[C_DUP] += 1
    else:
        got[g] = 1
        if s == rn:
            while rn < npk and got[off + rn] == 1:
                delivered += fl[f, FL_LAST] if rn == npk - 1 else ip[I_MTU]
                rn += 1
                if rn - 1 > s:
                    fi[f, FI_OOO] -= 1
            fi[f, FI_RCVNXT] = rn
        else:
            fi[f, FI_OOO] += 1
            if fi[f, FI_OOO] > fi[f, FI_ROMAX]:
                fi[f, FI_ROMAX] = fi[f, FI_OOO]
    respond(f, s, T_ACK, marked, ndp, now, st, fl, fle, fp, ip, ctr, rng)
    kk = ip[I_NACKK]
    lo = max(rn, fi[f, FI_NACKUP])
    for h in range(lo, s - kk + 1):
        if got[off + h] == 0:
            respond(f, h, T_NACK, False, False, now, st, fl, fle, fp, ip, ctr, rng)
    if s - kk + 1 > fi[f, FI_NACKUP]:
        fi[f, FI_NACKUP] = s - kk + 1
    return delivered


@once
def start_flow(f, now, st, fl, fle, ctr, fp, ip, rng):
    """Flow ``f`` starts: NDP credits / DCTCP window = the initial window; pinning picks the
    plane ``(hash(src, dst) + channel)``-th among the planes usable in the software view."""
    fi, ff, view, host_up, host_down = st.fi, st.ff, st.views, st.host_up, st.host_down
    ff[f, FF_START] = now
    iw = ip[I_IW]
    fi[f, FI_CRED] = iw
    ff[f, FF_CWND] = iw * float(ip[I_MTU])
    fi[f, FI_WINEND] = iw
    if ip[I_MODE] == M_PINNING:
        src, dst = fl[f, FL_SRC], fl[f, FL_DST]
        h = mix(mix(np.uint64(src), dst), 1) + np.uint64(fl[f, FL_CHAN])
        P = ip[I_P]
        cnt = 0
        for p in range(P):
            if plane_usable(p, src, dst, host_up, host_down, view, ip):
                cnt += 1
        r = np.int64(h % np.uint64(max(cnt, 1)))
        plane = np.int64(h % np.uint64(P))
        for p in range(P):
            if plane_usable(p, src, dst, host_up, host_down, view, ip):
                if r == 0:
                    plane = p
                    break
                r -= 1
        fi[f, FI_PLANE] = plane
    try_send(f, now, st, fl, fle, ctr, fp, ip, rng)


@hot
def record(tl, res, job, t, x):
    """Add ``x`` delivered bytes at time ``t`` to the per-job timeline ``tl[jobs, B]``
    (bins of ``res`` seconds); past the last bin, pairs of bins merge in place and the
    resolution doubles. Returns the resolution."""
    b = np.int64(t / res)
    nb = tl.shape[1]
    while b >= nb:
        for j in range(tl.shape[0]):
            for i in range(nb // 2):
                tl[j, i] = tl[j, 2 * i] + tl[j, 2 * i + 1]
            for i in range(nb // 2, nb):
                tl[j, i] = 0.0
        res *= 2.0
        b = np.int64(t / res)
    tl[job, b] += x
    return res


@once
def link_event(i, now, st, ev_link, ev_up, fp, ctr):
    """Link ``ev_link[i]`` changes state in truth (a down link drops what is sent onto it
    and what is in flight on it); every mechanism learns it after its reaction time."""
    li, hp = st.li, st.hp
    wl = st.wl
    lk = ev_link[i]
    up = 1 if ev_up[i] else 0
    if li[lk, L_TRUTH] != up:
        li[lk, L_TRUTH] = up
        if up == 0:
            li[lk, L_EPOCH] += 1
    for m in range(3):
        push(hp, wl, ctr, now + fp[F_REACT0 + m], K_VIEW, i * 3 + m)


@once
def view_event(ident, st, ev_link, ev_up, ctr):
    view = st.views
    i, m = ident // 3, ident % 3
    lk = ev_link[i]
    up = 1 if ev_up[i] else 0
    if view[m, lk] != up:
        view[m, lk] = up
        ctr[C_DOWN0 + m] += -1 if up == 1 else 1


@once
def arrive(k, now, st, fl, fle, fp, ip, ctr, rng, lat, tp, link_dst):
    """Packet ``k`` reached the far end of its link. Returns the flow whose receiver got
    payload in order (for the timeline) as ``(flow, bytes, sender_done)``."""
    li, lf, pi, pf, hp, view, link_tier = (
        st.li,
        st.lf,
        st.pi,
        st.pf,
        st.hp,
        st.views,
        st.link_tier,
    )
    wl = st.wl
    lk = pi[k, P_LINK]
    f = pi[k, P_FLOW]
    if li[lk, L_TRUTH] == 0 or pi[k, P_EPOCH] != li[lk, L_EPOCH]:
        ctr[C_DROP] += 1
        if pi[k, P_TYPE] == T_DATA:  # payload lost on a dead link
            st.ff[f, FF_LOST] += pi[k, P_SIZE] - ip[I_HDR]
        free(pi, ctr, k)
        return f, 0.0, False
    node = link_dst[lk]
    if node < ip[I_H]:
        typ = pi[k, P_TYPE]
        if typ == T_DATA or typ == T_HDR:  # noqa: SIM109
            return f, receive(k, now, st, fl, fle, fp, ip, ctr, rng, lat), False
        return f, 0.0, sender_ctrl(k, now, st, fl, fle, ctr, fp, ip, rng)
    size = pi[k, P_SIZE]
    lossless = ip[I_SW] == SW_LOSSLESS
    if lossless:
        lf[lk, LF_ING] += size
        if li[lk, L_PFC] == 0 and lf[lk, LF_ING] > fp[F_XOFF]:
            li[lk, L_PFC] = 1
            push(hp, wl, ctr, now + fp[F_PROP], K_PON, lk)
        pi[k, P_INLINK] = lk
    out = route(k, node, now, pi, lf, fp, ip, ctr, tp, view, rng)
    if out < 0:
        ctr[C_NOROUTE] += 1
        ctr[C_DROP] += 1
        if pi[k, P_TYPE] == T_DATA:
            st.ff[f, FF_LOST] += size - ip[I_HDR]
        if lossless:
            lf[lk, LF_ING] -= size
        free(pi, ctr, k)
        return f, 0.0, False
    enqueue(out, k, now, li, lf, pi, pf, fp, ip, ctr, hp, wl, link_tier, rng, st.sq)
    return f, 0.0, False


@hot
def run(
    st,
    fl,
    fle,
    flf,
    succ_ptr,
    succ,
    tp,
    link_dst,
    ev_time,
    ev_link,
    ev_up,
    fp,
    ip,
    ctr,
    rng,
    lat,
    tl,
):
    """The event loop (module doc). Returns ``(end time, timeline resolution)``."""
    fi, ff, li, lf, hp = st.fi, st.ff, st.li, st.lf, st.hp
    wl = st.wl
    n = fl.shape[0]
    res = fp[F_TLRES]
    ackrel = ip[I_ACKREL] == 1
    for f in range(n):
        if fi[f, FI_PENDING] == 0:
            push(hp, wl, ctr, flf[f, 0] + flf[f, 1], K_RELEASE, f)
    for i in range(ev_time.size):
        push(hp, wl, ctr, ev_time[i], K_LINKEV, i)
    now = 0.0
    until = fp[F_UNTIL]
    while ctr[C_HN] > 0 and ctr[C_STATUS] == ST_OK:
        if ctr[C_DONE] == n and ctr[C_SDONE] == n:
            break
        t, item = pop(hp, wl, ctr)
        prefetch_ahead(hp, ctr, st.pi, st.pf, li, lf, st.link_tier, st.sq)
        if t > until:
            now = until
            break
        now = t
        ctr[C_NEV] += 1
        kind = item & 15
        ident = item >> 4
        ctr[C_KIND + kind] += 1
        if kind == K_ARRIVE:
            f, x, sdone = arrive(ident, now, st, fl, fle, fp, ip, ctr, rng, lat, tp, link_dst)
            if x > 0.0:
                ff[f, FF_DELIV] += x
                res = record(tl, res, fl[f, FL_JOB], now, x)
                if fi[f, FI_RCVNXT] >= fl[f, FL_NPK] and fi[f, FI_RDONE] == 0:
                    fi[f, FI_RDONE] = 1
                    ff[f, FF_FINISH] = now
                    ctr[C_DONE] += 1
                    if not ackrel:
                        release_successors(f, now, fi, ff, flf, succ_ptr, succ, ctr, hp, wl)
            if sdone and ackrel:
                release_successors(f, now, fi, ff, flf, succ_ptr, succ, ctr, hp, wl)
        elif kind == K_WAKE:
            wake(ident, now, li, lf, st.pi, st.pf, fp, ip, ctr, hp, wl, st.link_tier, st.sq)
        elif kind == K_PACE:
            pace(ident, now, st, fl, fle, fp, ip, ctr, rng)
        elif kind == K_RELEASE:
            start_flow(ident, now, st, fl, fle, ctr, fp, ip, rng)
        elif kind == K_RTO:
            rto_fire(ident, now, st, fl, fle, ctr, fp, ip, rng)
        elif kind == K_LINKEV:
            link_event(ident, now, st, ev_link, ev_up, fp, ctr)
        elif kind == K_VIEW:
            view_event(ident, st, ev_link, ev_up, ctr)
        elif kind == K_PON:
            if li[ident, L_PAUSED] == 0:
                ctr[C_PAUSE] += 1
            li[ident, L_PAUSED] = 1
        elif kind == K_POFF:
            li[ident, L_PAUSED] = 0
            if li[ident, L_WAKE] == 0 and (li[ident, L_QH0] >= 0 or li[ident, L_QH1] >= 0):
                li[ident, L_WAKE] = 1
                push(hp, wl, ctr, max(now, lf[ident, LF_BUSY]), K_WAKE, ident)
    for lk in range(li.shape[0]):
        q_account(lf, lk, now)
    return now, res
