"""The testbed's placement: separate cores for serving and training, one shared shaped link.

**Cores** (``sched_setaffinity`` / ``taskset -c``, fixed for the whole run): core
``serve_core`` (0) runs the vLLM server (all its processes, and its OpenMP threads through
``VLLM_CPU_OMP_THREADS_BIND``) and the load client (a thread of this process, pinned);
core ``train_core`` (1) runs the two learner processes, the launcher that supervises them
and this process's other threads. A sync therefore frees no core of serving's: the
learners' compute and their sync both stay on core 1. The client shares serving's core,
not the learners', so that the learners' compute cannot delay the client's own clock
reads in a sync-correlated way (it costs serving a steady few per cent of core 0, the same
inside and outside syncs). The machine's other tenants are not pinned: on a shared machine
both cores also run other work (the load average is recorded per run).

**One link** (:mod:`trainfabric.diloco.train.netns`): learner ``r`` lives in namespace
``r`` behind a tbf-shaped veth to a bridge. vLLM listens on learner 0's address inside
learner 0's namespace; the client runs inside learner 1's namespace. Requests go learner
1's uplink → bridge → learner 0's downlink, responses the reverse: the same two queues each
way that the learners' all-reduce fills during a sync. Health probes run inside learner 0's
namespace and do not cross the link.

**The link's rate, fixed from a deployment before measuring** (:func:`link_rate_mbit`).
INTELLECT-1 (Jaghouar et al., 2024, arXiv 2412.01152: a 10B-parameter DiLoCo run across
3 continents, H = 100 inner steps, int8 pseudo-gradients): nodes trained independently for
about 38 minutes between outer syncs that took 1 to 7 minutes. The ratio of model bytes to
link rate is the sync's duration, ``T_sync = V / R``; the testbed's inner phase cannot last
38 minutes, so the ratio is kept in units of the inner phase, ``f = T_sync / T_inner``, at
INTELLECT-1's inter-continental end, ``f = 7 / 38 = 0.184`` (the 1-minute syncs were the
well-connected nodes; a shared WAN link is the other end). For the tiny model
(``P`` = 834,304 parameters, fp32: ``S = 4 P`` = 3.34 MB) and ``M = 2`` learners, each
learner's uplink carries ``V = 2 (M − 1) / M · S`` = 3.34 MB per ring all-reduce; with the
testbed's inner phase ``T_inner`` = ``period_s`` = 10 s of compute between syncs,
``T_sync = f · T_inner`` = 1.84 s and ``R = 8 V / T_sync`` = 14.5 Mbit/s. Serving's bytes are
*not* scaled: they are what the tiny server sends (a 2,048-token prompt is ~10 kB of JSON
token ids, a streamed token ~250 B), about 1% of that rate at the default load; so a sync
costs serving through the link's queue (a packet waits behind the queued sync bytes), not
through a share of its rate.

"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import partial
from pathlib import Path

# INTELLECT-1 (arXiv 2412.01152): ~38 min of inner steps (H = 100), then a 1-7 min sync.
INTELLECT1 = {
    "source": "INTELLECT-1 technical report (Jaghouar et al., 2024, arXiv 2412.01152)",
    "params": 10e9,
    "payload_bytes_per_param": 1,  # int8 pseudo-gradients
    "inner_phase_min": 38.0,
    "sync_min": (1.0, 7.0),
}
SYNC_FRACTION = INTELLECT1["sync_min"][1] / INTELLECT1["inner_phase_min"]  # 7 / 38
HEADLINE_QUEUE_MS = 100.0
INNER_PHASE_S = 10.0  # the testbed's inner phase between syncs (s)
BURST_KB = 32.0  # tbf burst


def ring_bytes(params: int, bytes_per_param: float, learners: int) -> float:
    """Bytes each learner sends (and receives) in one ring all-reduce of the model:
    ``2 (M − 1) / M · S`` with ``S = params · bytes_per_param``."""
    return 2 * (learners - 1) / learners * params * bytes_per_param


def link_rate_mbit(params: int, learners: int, period_s: float, fraction: float) -> float:
    """The link rate (Mbit/s) at which the tiny model's fp32 sync lasts ``fraction`` of the
    ``period_s`` inner phase (module doc): ``R = 8 V / (fraction · period_s)``."""
    if period_s <= 0 or fraction <= 0:
        raise ValueError("period_s and fraction must be > 0")
    return 8 * ring_bytes(params, 4, learners) / (fraction * period_s) / 1e6


def testbed_shaping(params: int, learners: int, period_s: float, queue_ms: float, burst_kb: float):
    """The shared link: the rate at which the tiny model's fp32 sync lasts INTELLECT-1's
    share of a ``period_s`` inner phase (:func:`link_rate_mbit`), tbf queue ``queue_ms``."""
    from trainfabric.diloco.train.config import ShapingConfig

    rate = link_rate_mbit(params, learners, period_s, SYNC_FRACTION)
    return ShapingConfig(rate_mbit=round(rate, 3), burst_kb=burst_kb, latency_ms=queue_ms)


@contextmanager
def placed(shaping, kind: str, serve_core: int, train_core: int, log_path: Path,
           learners: int = 2):  # fmt: skip
    """The testbed's placement (module doc) for the ``with`` block: this process's threads
    on ``train_core``, the learners' network shaped by ``shaping``, the server in learner 0's
    namespace on ``serve_core`` (``learners`` namespaces); yields ``(server, network)`` and
    restores the affinity."""
    from trainfabric.diloco.serve.server import serve
    from trainfabric.diloco.train import netns

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {train_core})  # this thread and the ones it starts
    try:
        with netns.create(learners, shaping) as net:
            space = net.namespace(0)
            with serve(kind=kind, host=net.address(0), log_path=log_path,
                       prefix=netns.exec_prefix(space), inside=partial(netns.call_in, space),
                       cpus=(serve_core,)) as srv:  # fmt: skip
                yield srv, net
    finally:
        os.sched_setaffinity(0, before)


def client_replay(net, serve_core: int):
    """``replay`` as the testbed's load client runs it: in learner 1's namespace (its
    requests cross the shared link), pinned to ``serve_core``."""
    from trainfabric.diloco.serve.replay import replay
    from trainfabric.diloco.train import netns

    return partial(netns.call_in, net.namespace(1), replay, cpus=(serve_core,))
