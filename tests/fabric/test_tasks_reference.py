"""The DAG-driven engine against references: a brute-force Python event loop on random small
task graphs (hypothesis), and the reuse of solved flow sets (memo + replay) against the
step-by-step run on ring / pipeline graphs to 1e-9.

The reference re-solves the max-min rates of every flow in flight at every event with
:func:`trainfabric.fabric.maxmin.max_min_rates` (no components, no reuse, no compiled loop)
and applies the count-down rule literally.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flows import mix64
from trainfabric.fabric.maxmin import fill_local, fill_scratch, max_min_rates
from trainfabric.fabric.routing import Router
from trainfabric.fabric.tasks import loop as L
from trainfabric.fabric.tasks.engine import TaskSim, run_tasks
from trainfabric.fabric.tasks.graph import BARRIER, COMM, TIMER, TaskGraph

WIRE = 4160 / 4096
TOPO = T.multiplane(16, 2, 8, 400e9)


def reference(topo, g: TaskGraph, router: Router):
    """Start and finish of every task by a literal event loop (module doc)."""
    routes = router.route(g.conn_table(), np.arange(g.n_conns))
    n = g.n
    preds = [[] for _ in range(n)]
    for i in range(n):
        for s in g.succ[g.succ_ptr[i] : g.succ_ptr[i + 1]]:
            preds[s].append(i)
    pending = [len(p) for p in preds]
    ready = np.zeros(n)
    start, finish = np.full(n, np.nan), np.full(n, np.nan)
    starts = {i: g.latency_s[i] for i in range(n) if not preds[i]}
    finishes: dict[int, float] = {}
    flows: list[list] = []  # [task, conn, remaining wire bits]
    left, arrive = np.zeros(n, int), np.zeros(n)
    t = 0.0
    while True:
        busy = True
        while busy:
            busy = False
            for i in sorted(starts, key=lambda i: (starts[i], i)):
                if starts[i] > t:
                    continue
                del starts[i]
                busy = True
                start[i] = t
                if g.kind[i] != COMM:
                    finishes[i] = t + g.duration_s[i]
                    continue
                conns, nbytes = g.task_flows(i)
                arrive[i] = t
                for c, b in zip(conns, nbytes, strict=True):
                    if b == 0:
                        arrive[i] = max(arrive[i], t + routes.hops[c] * topo.hop_latency_s)
                    else:
                        flows.append([i, c, b * WIRE * 8])
                        left[i] += 1
                if left[i] == 0:
                    finishes[i] = arrive[i]
            for i in sorted(finishes, key=lambda i: (finishes[i], i)):
                if finishes[i] > t:
                    continue
                finish[i] = finishes.pop(i)
                busy = True
                for s in g.succ[g.succ_ptr[i] : g.succ_ptr[i + 1]]:
                    ready[s] = max(ready[s], finish[i])
                    pending[s] -= 1
                    if pending[s] == 0:
                        starts[s] = ready[s] + g.latency_s[s]
        rate = np.zeros(len(flows))
        if flows:
            conn = np.array([f[1] for f in flows])
            rate, _ = max_min_rates(
                routes.group[conn],
                routes.weight[conn],
                router.groups,
                topo.capacity_bps,
                np.arange(len(flows)),
            )
        proj = [t + f[2] / r for f, r in zip(flows, rate, strict=True)]
        t_next = min([*starts.values(), *finishes.values(), *proj], default=np.inf)
        if t_next == np.inf:
            return start, finish
        keep = []
        for f, r, p in zip(flows, rate, proj, strict=True):
            f[2] -= r * (t_next - t)
            if p <= t_next or f[2] <= 1e-9 * 8:
                i = f[0]
                arrive[i] = max(arrive[i], p + routes.hops[f[1]] * topo.hop_latency_s)
                left[i] -= 1
                if left[i] == 0:
                    finishes[i] = arrive[i]
            else:
                keep.append(f)
        flows = keep
        t = t_next


@st.composite
def task_graphs(draw):
    n = draw(st.integers(2, 10))
    kind = draw(st.lists(st.sampled_from([TIMER, COMM, BARRIER]), min_size=n, max_size=n))
    dur = [draw(st.sampled_from([0.0, 1e-5, 3e-5])) if k == TIMER else 0.0 for k in kind]
    lat = draw(st.lists(st.sampled_from([0.0, 0.0, 2e-6]), min_size=n, max_size=n))
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.booleans())]
    conn_src = [0, 3, 5, 9, 12]
    conn_dst = [7, 8, 13, 1, 2]
    flow_set = [-1] * n
    set_ptr, flow_conn, flow_bytes = [0], [], []
    for i, k in enumerate(kind):
        if k != COMM:
            continue
        m = draw(st.integers(0, 3))
        flow_conn += draw(st.lists(st.integers(0, 4), min_size=m, max_size=m))
        flow_bytes += draw(st.lists(st.sampled_from([0.0, 1e4, 3e5, 1e6]), min_size=m, max_size=m))
        set_ptr.append(len(flow_conn))
        flow_set[i] = len(set_ptr) - 2
    return TaskGraph.from_edges(
        kind,
        dur,
        edges,
        latency_s=lat,
        flow_set=flow_set,
        set_ptr=set_ptr,
        flow_conn=flow_conn,
        flow_bytes=flow_bytes,
        conn_src=conn_src,
        conn_dst=conn_dst,
    )


@given(task_graphs(), st.sampled_from(["ecmp", "spray", "pinning"]), st.booleans())
def test_random_small_graphs_match_a_brute_force_event_loop(g, mode, reuse):
    res = run_tasks(TOPO, g, Router(TOPO, mode, seed=3), reuse=reuse)
    start, finish = reference(TOPO, g, Router(TOPO, mode, seed=3))
    np.testing.assert_allclose(res.start_s, start, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(res.finish_s, finish, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(res.delivered_bytes, g.task_bytes(), rtol=1e-9, atol=1e-6)
    for i in range(g.n):  # the releasing predecessor: the last to finish, ties to the lower
        p = g.predecessors()
        pr = p[1][p[0][i] : p[0][i + 1]]
        if pr.size:
            assert res.released_by[i] == pr[np.argmax(finish[pr] >= finish[pr].max() - 1e-15)]


# -- reuse of solved flow sets against the step-by-step run -----------------------------------
def pipeline_with_rings(
    servers: int, pp: int = 2, steps: int = 6, seed: int = 0, phase_form: bool = False
) -> TaskGraph:
    """``pp`` stages of ``servers / pp`` servers (8 GPUs, 2 channels per GPU pair): per stage a
    compute timer per server, a PP send to the next stage (one comm task per server pair),
    then a ring of ``steps`` steps per stage; stages start at different times, so rings,
    sends and compute overlap partly (replays are interrupted and materialised).
    ``phase_form``: each ring step is one comm task holding every pair's flows (the phase
    nodes of the fabric's DAGs) instead of one task per pair between barriers."""
    rng = np.random.default_rng(seed)
    d = servers // pp
    slot = rng.permutation(servers)
    conns: dict = {}
    sets: dict = {}
    set_ptr, flow_conn, flow_bytes = [0], [], []
    kind, dur, edges, flow_set = [], [], [], []

    def add(k, t=0.0, fs=-1):
        kind.append(k)
        dur.append(t)
        flow_set.append(fs)
        return len(kind) - 1

    def fset(pairs, nbytes):
        if (pairs, nbytes) not in sets:
            for a, b in pairs:
                for gpu in range(8):
                    for ch in range(2):
                        key = (a, b, gpu, ch)
                        conns.setdefault(key, len(conns))
                        flow_conn.append(conns[key])
                        flow_bytes.append(nbytes)
            set_ptr.append(len(flow_conn))
            sets[pairs, nbytes] = len(set_ptr) - 2
        return sets[pairs, nbytes]

    for p in range(pp):
        comp = [add(TIMER, 1e-4 * (p + 1) * (1 + 0.1 * x)) for x in range(d)]
        prev = add(BARRIER)
        edges += [(c, prev) for c in comp]
        if p + 1 < pp:
            sends = [add(COMM, fs=fset(((p * d + x, (p + 1) * d + x),), 2e5)) for x in range(d)]
            edges += [(comp[x], s) for x, s in enumerate(sends)]
        ring = tuple((p * d + x, p * d + (x + 1) % d) for x in range(d))
        for k in range(steps):
            nb = 1e5 if k < steps // 2 else 5e4
            if phase_form:
                step = add(COMM, fs=fset(ring, nb))
                edges.append((prev, step))
                prev = step
                continue
            tasks = [add(COMM, fs=fset((pair,), nb)) for pair in ring]
            ex = add(BARRIER)
            edges += [(prev, t) for t in tasks] + [(t, ex) for t in tasks]
            prev = ex
    keys = np.array(list(conns), np.int64)
    return TaskGraph.from_edges(
        kind,
        dur,
        edges,
        flow_set=flow_set,
        set_ptr=set_ptr,
        flow_conn=flow_conn,
        flow_bytes=flow_bytes,
        conn_src=slot[keys[:, 0]] * 8 + keys[:, 2],
        conn_dst=slot[keys[:, 1]] * 8 + keys[:, 2],
        conn_key=mix64(keys[:, 0], keys[:, 1], keys[:, 2], keys[:, 3], seed=seed),
        conn_channel=keys[:, 3],
    )


@pytest.mark.parametrize("mode", ["ecmp", "pinning", "spray", "flowlet"])
def test_reusing_solved_flow_sets_equals_the_step_by_step_run(mode):
    topo = T.multiplane(128, 2, 16, 800e9)
    g = pipeline_with_rings(16, pp=2, steps=8)
    step = run_tasks(topo, g, Router(topo, mode, seed=5), reuse=False)
    fast = run_tasks(topo, g, Router(topo, mode, seed=5), reuse=True)
    if mode != "flowlet":  # flowlet re-hashes after every idle gap: no set repeats
        assert fast.memo_hits > 0
    assert step.memo_hits == step.memo_misses == 0
    np.testing.assert_allclose(fast.finish_s, step.finish_s, rtol=1e-9)
    np.testing.assert_allclose(fast.link_bits, step.link_bits, rtol=1e-9, atol=1e-3)
    np.testing.assert_allclose(fast.bin_bits, step.bin_bits, rtol=1e-9, atol=1e-3)
    np.testing.assert_allclose(fast.delivered_bytes, g.task_bytes(), rtol=1e-9)


@pytest.mark.parametrize("mode", ["ecmp", "spray", "adaptive", "flowlet"])
@pytest.mark.parametrize("flap", [False, True])
def test_set_level_replays_equal_the_step_by_step_run(mode, flap):
    """One comm task per ring step: a step that starts alone runs as one event from its
    set's memo (``set_replays``), is materialised when a send or the other stage's ring
    starts meanwhile, and at a link event (a cable down and up in the middle of the run,
    ``flap``); every task's finish, the delivered bytes and the link and class loads equal
    the run without reuse."""
    topo = T.multiplane(128, 2, 16, 800e9)
    g = pipeline_with_rings(16, pp=2, steps=10, phase_form=True)
    events = None
    if flap:
        quiet = run_tasks(topo, g, Router(topo, mode, seed=5), reuse=False)
        link = int(np.argmax(quiet.link_bits))
        t = 0.4 * quiet.end_s
        events = LinkEvents(
            np.array([t, t + 0.1 * quiet.end_s]), np.array([link, link]), np.array([False, True])
        )
    step = run_tasks(topo, g, Router(topo, mode, seed=5), reuse=False, events=events)
    fast = run_tasks(topo, g, Router(topo, mode, seed=5), reuse=True, events=events)
    assert step.set_replays == 0
    if mode != "flowlet":  # flowlet re-hashes after every idle gap: no set repeats
        assert fast.set_replays > 0
    np.testing.assert_allclose(fast.start_s, step.start_s, rtol=1e-9)
    np.testing.assert_allclose(fast.finish_s, step.finish_s, rtol=1e-9)
    np.testing.assert_allclose(fast.link_bits, step.link_bits, rtol=1e-9, atol=1e-3)
    np.testing.assert_allclose(fast.bin_bits, step.bin_bits, rtol=1e-9, atol=1e-3)
    np.testing.assert_allclose(fast.delivered_bytes, step.delivered_bytes, rtol=1e-9)
    assert fast.peak_flows == step.peak_flows


@st.composite
def repeated_set_graphs(draw):
    """Chains of comm tasks drawn from a few flow sets (so sets repeat, alone or beside
    another chain), with timers between them: the cases set-level replays take."""
    n_sets = draw(st.integers(1, 3))
    set_ptr, flow_conn, flow_bytes = [0], [], []
    for _ in range(n_sets):
        m = draw(st.integers(1, 4))
        flow_conn += draw(st.lists(st.integers(0, 4), min_size=m, max_size=m))
        flow_bytes += draw(st.lists(st.sampled_from([1e4, 3e5, 1e6]), min_size=m, max_size=m))
        set_ptr.append(len(flow_conn))
    kind, dur, flow_set, edges = [], [], [], []
    for _ in range(draw(st.integers(1, 2))):  # chains
        prev = -1
        for _ in range(draw(st.integers(2, 6))):
            comm = draw(st.booleans()) or prev < 0
            kind.append(COMM if comm else TIMER)
            dur.append(0.0 if comm else draw(st.sampled_from([1e-5, 4e-5])))
            flow_set.append(draw(st.integers(0, n_sets - 1)) if comm else -1)
            if prev >= 0:
                edges.append((prev, len(kind) - 1))
            prev = len(kind) - 1
    return TaskGraph.from_edges(
        kind,
        dur,
        edges,
        flow_set=flow_set,
        set_ptr=set_ptr,
        flow_conn=flow_conn,
        flow_bytes=flow_bytes,
        conn_src=[0, 3, 5, 9, 12],
        conn_dst=[7, 8, 13, 1, 2],
    )


@given(repeated_set_graphs(), st.sampled_from(["ecmp", "spray", "adaptive"]))
def test_set_level_replays_on_random_graphs_match_the_brute_force_loop(g, mode):
    res = run_tasks(TOPO, g, Router(TOPO, mode, seed=3), reuse=True)
    start, finish = reference(TOPO, g, Router(TOPO, mode, seed=3))
    np.testing.assert_allclose(res.start_s, start, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(res.finish_s, finish, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(res.delivered_bytes, g.task_bytes(), rtol=1e-9, atol=1e-6)


def test_a_snapshot_inside_a_set_level_replay_resumes_to_the_same_run():
    """A snapshot taken while a step runs as a set-level replay holds its flows in flight
    (materialised); resuming from it gives the uninterrupted run's numbers."""
    topo = T.multiplane(128, 2, 16, 800e9)
    g = pipeline_with_rings(16, pp=2, steps=10, phase_form=True)
    router = Router(topo, "ecmp", seed=5)
    whole = run_tasks(topo, g, router)
    for frac in (0.3, 0.55, 0.8):
        sim = TaskSim(topo, g, router)
        snap = sim.snapshot(frac * whole.end_s)
        res = TaskSim.resume(snap, sim).run()
        np.testing.assert_allclose(res.finish_s, whole.finish_s, rtol=1e-9)
        np.testing.assert_allclose(res.link_bits, whole.link_bits, rtol=1e-9, atol=1e-3)


# -- the local re-solves after departures against a full max-min solve -------------------------
def _departures(seed: int, which: str, k: int):
    """40 random ECMP flows solved by ``fill_local`` (rates, bottlenecks), then ``k`` of
    them (the fastest, the slowest or random ones) unlinked as the loop does."""
    rng = np.random.default_rng(seed)
    n, hosts = 40, TOPO.n_hosts
    src = rng.integers(0, hosts, n)
    dst = (src + rng.integers(1, hosts, n)) % hosts
    g = TaskGraph.from_edges(
        [COMM],
        [0.0],
        [],
        flow_set=[0],
        set_ptr=[0, n],
        flow_conn=np.arange(n),
        flow_bytes=np.ones(n),
        conn_src=src,
        conn_dst=dst,
        conn_key=mix64(src, dst, np.arange(n), seed=seed),
        conn_channel=np.zeros(n, np.int64),
    )
    router = Router(TOPO, "ecmp", seed=seed)
    r = router.route(g.conn_table(), np.arange(n))
    cap = np.ascontiguousarray(TOPO.capacity_bps, np.float64)
    K, links = r.group.shape[1], TOPO.n_links
    lhead = np.full(links, -1, np.int64)
    lnext, lprev = np.full(n * K, -1, np.int64), np.full(n * K, -1, np.int64)
    fg, fw = np.full((n, K), -1, np.int32), np.zeros((n, K))
    for f in range(n):
        L._link_insert(f, f, r.group, r.weight, fg, fw, lhead, lnext, lprev)
    st_ = {
        "n": n,
        "cap": cap,
        "fg": fg,
        "fw": fw,
        "lhead": lhead,
        "lnext": lnext,
        "lmap": np.full(links, -1, np.int64),
        "fz": np.zeros(links),
        "mark": np.zeros(n, np.int8),
        "vis": np.zeros(n, np.bool_),
        "lvis": np.zeros(links, np.bool_),
        "task": np.zeros(n, np.int64),
        "bott": np.full(n, -1, np.int64),
        "rate": np.zeros(n),
    }
    assert _fill(st_, np.arange(n), st_["rate"], st_["bott"]) == 0
    want_all, _ = max_min_rates(r.group, r.weight, router.groups, cap, np.arange(n))
    np.testing.assert_allclose(st_["rate"], want_all, rtol=1e-9)
    order = np.argsort(st_["rate"], kind="stable")
    gone = {"fastest": order[-k:], "slowest": order[:k], "random": rng.choice(n, k, False)}[which]
    left = np.setdiff1d(np.arange(n), gone)
    ldirty, dl, ndl = np.zeros(links, np.bool_), np.empty(links, np.int64), 0
    for f in gone:
        ndl = L._link_remove(f, fg, lhead, lnext, lprev, ldirty, dl, ndl)
        st_["task"][f] = -1
    want, _ = max_min_rates(r.group, r.weight, router.groups, cap, left)
    return st_, gone, left, dl[:ndl], want


def _fill(st_, fl, rate, bott) -> int:
    s = st_
    args = (s["fg"], s["fw"], np.zeros(s["n"]), s["cap"], s["lmap"], 1e-9, rate, s["fz"])
    wf, wi = fill_scratch(s["cap"].size)
    return fill_local(fl, fl.size, *args, s["lhead"], s["lnext"], s["mark"], bott, wf, wi)


def _search(st_, seeds, dl, thr):
    s, fl = st_, np.empty(st_["n"], np.int64)
    args = (s["rate"], s["task"], s["fg"], s["fw"], s["lhead"], s["lnext"], s["vis"], s["lvis"])
    lq = np.empty(s["lvis"].size, np.int64)
    nf = L._dirty_flows(seeds, seeds.size, dl, dl.size, thr, *args, fl, s["fz"], lq)
    return fl[:nf]


def _reset(st_) -> bool:
    return not (st_["fz"].any() or st_["mark"].any() or st_["lvis"].any() or st_["vis"].any())


@given(st.integers(0, 10_000), st.sampled_from(["fastest", "slowest", "random"]), st.integers(1, 4))
def test_resolving_flows_at_or_above_the_departed_rate_equals_a_full_solve(seed, which, k):
    """Flows leave; only those at or above the smallest departed rate that the search reaches
    are re-solved, the others held (``tasks.loop._dirty_flows`` + ``fill_local``): the rates
    equal ``max_min_rates`` of the flows left, solved from scratch."""
    s, gone, left, dl, want = _departures(seed, which, k)
    fl = _search(s, np.empty(0, np.int64), dl, s["rate"][gone].min() * (1 - 1e-6))
    new = s["rate"].copy()
    assert _fill(s, fl, new, np.full(s["n"], -1, np.int64)) == 0
    assert not np.isin(fl, gone).any()
    np.testing.assert_allclose(new[left], want, rtol=1e-9)
    assert _reset(s)


@given(st.integers(0, 10_000), st.sampled_from(["fastest", "slowest", "random"]), st.integers(1, 4))
def test_widening_by_violators_after_departures_equals_a_full_solve(seed, which, k):
    """Flows leave; the held flows that fail the bottleneck test (``tasks.loop._violators``)
    are re-solved with the flows solved so far, round after round, the others held, as the
    loop does before it falls back to the rule above: the rates equal ``max_min_rates`` of
    the flows left, solved from scratch."""
    s, gone, left, dl, want = _departures(seed, which, k)
    new, bnew = s["rate"].copy(), np.full(s["n"], -1, np.int64)
    fl, viol, rounds = np.empty(0, np.int64), np.empty(s["n"], np.int64), 0
    while True:
        assert _fill(s, fl, new, bnew) == 0
        args = (s["fg"], s["fw"], new, s["rate"], bnew, s["bott"], s["cap"], s["lhead"])
        lq = np.empty(s["lvis"].size, np.int64)
        nv = L._violators(
            fl, fl.size, dl, dl.size, *args, s["lnext"], s["mark"], s["lvis"], viol, 4e-9, lq
        )
        if nv == 0:
            break
        rounds += 1
        fl = _search(s, np.concatenate((fl, viol[:nv])), dl[:0], np.inf)
    np.testing.assert_allclose(new[left], want, rtol=1e-9)
    assert not np.isin(fl, gone).any() and rounds <= s["n"]
    assert _reset(s)


@pytest.mark.parametrize("mode", ["ecmp", "pinning"])
def test_every_widening_limit_gives_the_same_run(mode):
    """Departures re-solved by widening alone, by the departure rule after one round, and
    at the default limit (``widen_flows``, a speed knob): the same finish times and link
    loads to 1e-9, through different amounts of work."""
    topo = T.multiplane(128, 2, 16, 800e9)
    g = pipeline_with_rings(16, pp=2, steps=8, seed=3)
    runs = [
        run_tasks(topo, g, Router(topo, mode, seed=5), reuse=False, widen_flows=w)
        for w in (0, 1024, 10**9)
    ]
    for r in runs[1:]:
        np.testing.assert_allclose(r.finish_s, runs[0].finish_s, rtol=1e-9)
        np.testing.assert_allclose(r.link_bits, runs[0].link_bits, rtol=1e-9, atol=1e-3)
    assert len({r.n_flows_solved for r in runs}) > 1
    # only the departures' work differs: the joins solve the same whole components
    assert len({(r.n_component_solves, r.n_component_flows_solved) for r in runs}) == 1
    assert 0 < runs[0].n_component_flows_solved < min(r.n_flows_solved for r in runs)


def test_routes_over_several_links_solve_no_components_locally():
    """Spray's routes split over links, so every solve is global: no component counts."""
    topo = T.multiplane(128, 2, 16, 800e9)
    r = run_tasks(topo, pipeline_with_rings(8, steps=4, seed=1), Router(topo, "spray"))
    assert r.n_rate_solves > 0 and r.n_component_solves == r.n_component_flows_solved == 0


@pytest.mark.parametrize("bad", [-1, 2.5])
def test_a_bad_widening_limit_names_the_field(bad):
    topo = T.multiplane(128, 2, 16, 800e9)
    with pytest.raises(ConfigError, match="widen_flows"):
        run_tasks(topo, pipeline_with_rings(4, steps=2), Router(topo, "ecmp"), widen_flows=bad)


# -- split modes: departures certified instead of re-solved ------------------------------------
@given(
    task_graphs(),
    st.sampled_from(["spray", "adaptive"]),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_certified_departures_in_split_modes_equal_re_solving_every_one(g, mode, seed, reuse):
    """Split routes on a fabric with failed cables (asymmetric splits, flows ending at their
    own times): skipping the re-solve after departures that change no rate
    (``certify_departures``) gives the same starts, finishes and link loads as re-solving
    every departure (without failures the brute-force test above covers ``spray``)."""
    up = T.fail_links(TOPO, 0.2, seed=seed)
    runs = [
        run_tasks(
            TOPO, g, Router(TOPO, mode, seed=3), reuse=reuse, link_up=up, certify_departures=c
        )  # fmt: skip
        for c in (True, False)
    ]
    res, every = runs
    np.testing.assert_allclose(res.start_s, every.start_s, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(res.finish_s, every.finish_s, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(res.link_bits, every.link_bits, rtol=1e-9, atol=1e-3)
    assert res.n_rate_solves <= every.n_rate_solves


@pytest.mark.parametrize("mode", ["spray", "adaptive"])
def test_certified_departures_on_a_failed_fabric_equal_re_solving_every_one(mode):
    """A medium case end to end: two pipeline stages' rings on 16 servers with 10% of the
    cables failed; the certified run equals the one that re-solves every departure (finish
    times, link and class loads to 1e-9) with fewer solves."""
    topo = T.multiplane(128, 2, 16, 800e9)
    g = pipeline_with_rings(16, pp=2, steps=8, phase_form=True)
    up = T.fail_links(topo, 0.1, seed=11)
    runs = [
        run_tasks(topo, g, Router(topo, mode, seed=5), link_up=up, certify_departures=c)
        for c in (True, False)
    ]
    fast, every = runs
    np.testing.assert_allclose(fast.finish_s, every.finish_s, rtol=1e-9)
    np.testing.assert_allclose(fast.link_bits, every.link_bits, rtol=1e-9, atol=1e-3)
    np.testing.assert_allclose(fast.bin_bits, every.bin_bits, rtol=1e-9, atol=1e-3)
    assert fast.n_rate_solves < every.n_rate_solves
