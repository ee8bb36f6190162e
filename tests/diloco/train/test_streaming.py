"""Streaming DiLoCo (``diloco/train/streaming.py``) through the real learner loop.

The fast tests run ``M`` real :class:`Learner` loops (``Learner.run``: inner steps, commands,
fragment starts and merges, final syncs, checkpoints) in threads of this process; only their
collectives (the per-step command broadcast, DiLoCo's reduce and fences, the fragments'
all-reduce and all-gather) are in-process stand-ins that sum in rank order. They drive the
tiny residual net and batch function of ``benchmarks/_streaming_reference.py`` in float64
and compare with (a) the existing DiLoCo path run the same way, (b) that file's independent
reference written from the paper's equations, with (c) control references that change one
hyper-parameter; (d) the quantisers against their analytic bounds; (e) config errors. The
slow test repeats (a) and (b) with real learner processes over gloo, whose collectives are
asynchronous (the overlap is real), as ``benchmarks/diloco_streaming.py`` does.
"""

import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from trainfabric.config import validate
from trainfabric.diloco.train import quantize as q
from trainfabric.diloco.train.config import ModelConfig, StreamingConfig, TrainConfig
from trainfabric.diloco.train.learner import STATUS_WIDTH, Learner, WorkerSpec
from trainfabric.diloco.train.streaming import (
    DONE,
    block_groups,
    fragment_params,
    offsets,
    starts_at,
)
from trainfabric.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import _streaming_reference as ref  # noqa: E402

BLOCKS = 4
TOL = 1e-12


def config(streaming=None, **kw) -> TrainConfig:
    base = dict(
        learners=2, steps=12, H=4, control_window_s=0.0, model=ModelConfig(layers=BLOCKS),
        inner_lr=1e-2, dtype="float64", checkpoint_every=1000, eval_batches=1,
        shaping=None, unshaped_ok=True,
    )  # fmt: skip
    return TrainConfig(**(base | kw), streaming=streaming)


# ---- the in-process group ------------------------------------------------------------------
class World:
    """``world`` learner threads exchanging values through a barrier."""

    def __init__(self, world: int):
        self.world, self.barrier = world, threading.Barrier(world)
        self.slots: list = [None] * world
        self.result = None

    def exchange(self, rank, value, combine):
        self.slots[rank] = value
        self.barrier.wait()
        if rank == 0:
            self.result = combine(list(self.slots))
        self.barrier.wait()
        out = self.result
        self.barrier.wait()
        return out


def _sum(xs):
    total = xs[0].clone()
    for x in xs[1:]:
        total += x
    return total


class ThreadCollectives:
    def __init__(self, group: World, rank: int):
        self.group, self.rank, self.world = group, rank, group.world

    def all_reduce(self, flat):
        flat.copy_(self.group.exchange(self.rank, flat.clone(), _sum))
        return DONE

    def all_gather(self, buf):
        return self.group.exchange(self.rank, buf.clone(), list), DONE


class FixedHConn:
    """Rank 0's pipe to the launcher: answers control points like ``FixedH(H)``."""

    def __init__(self, H: int):
        self.H, self.answer, self.sent = H, None, []

    def send(self, msg):
        kind, body = msg
        self.sent.append(msg)
        self.answer = body["h"] >= self.H if kind == "progress" else True

    def recv(self):
        return self.answer


class ThreadLearner(Learner):
    def __init__(self, spec: WorkerSpec, group: World, conn):
        self.group = group
        status = [0.0] * (spec.cfg.learners * STATUS_WIDTH)
        super().__init__(spec, status, conn, SimpleNamespace(value=0))

    def command(self, cmd):
        return self.group.exchange(self.rank, cmd, lambda xs: xs[0])

    def reduce(self, flat):
        flat.copy_(self.group.exchange(self.rank, flat.clone(), _sum))

    def fence(self):
        self.group.barrier.wait()

    def collectives(self):
        return ThreadCollectives(self.group, self.rank)


def run_threads(cfg, run_dir, model=None, batch=None, resume_step=None):
    """The learners' final parameters (per learner) and rank 0's sync records."""
    model = model or ref.TinyNet(blocks=BLOCKS)
    batch = batch or ref.Batches()
    run_dir.mkdir(parents=True, exist_ok=True)
    group = World(cfg.learners)
    conn = FixedHConn(cfg.H)
    learners = [
        ThreadLearner(
            WorkerSpec(r, cfg, run_dir, "", None, None, resume_step, 0, model, batch),
            group,
            conn if r == 0 else None,
        )
        for r in range(cfg.learners)
    ]
    errors = []

    def go(learner):
        try:
            learner.run()
        except BaseException as exc:  # re-raised below
            errors.append(exc)
            group.barrier.abort()

    threads = [threading.Thread(target=go, args=(lr,)) for lr in learners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    syncs = [body for kind, body in conn.sent if kind == "sync_end"]
    return [[p.detach().clone() for p in lr.params] for lr in learners], syncs


def max_diff(a, b) -> float:
    pairs = (xy for pa, pb in zip(a, b, strict=True) for xy in zip(pa, pb, strict=True))
    return max(float((x - y).abs().max()) for x, y in pairs)


# ---- (a) P = 1, τ = 0, α = 0: DiLoCo ----------------------------------------------------------
@pytest.mark.parametrize("steps", [12, 10])
def test_one_fragment_no_overlap_equals_diloco(tmp_path, steps):
    """DiLoCo's path (controller, ``sync``, ``outer_step``) and the streaming path with one
    fragment, no overlap and α = 0 through the same learner loop: equal (to 1e-12; in fact
    bit for bit). ``steps`` 10 ends with a final sync of 2 steps."""
    one = StreamingConfig(fragments=1, overlap=0, alpha=0.0)
    ours, syncs = run_threads(config(one, steps=steps), tmp_path / "s")
    theirs, dsyncs = run_threads(config(None, steps=steps), tmp_path / "d")
    assert max_diff(ours, theirs) <= TOL
    assert (
        [s["step"] for s in syncs]
        == [s["step"] for s in dsyncs]
        == [4, 8, 12][: steps // 4] + ([10] if steps % 4 else [])
    )
    init = [[p.detach() for p in ref.TinyNet(blocks=BLOCKS).double().parameters()]]
    assert max_diff(ours[:1], init) > 1e-2  # the training moved the parameters
    h3 = run_threads(config(one, steps=steps, H=3), tmp_path / "h3")[0]
    assert max_diff(h3, theirs) > 1e-6  # the comparison can fail


# ---- (b), (c) fragments against the reference --------------------------------------------------
CASES = {
    "P2-tau1-alpha.5": dict(streaming=StreamingConfig(fragments=2, overlap=1, alpha=0.5)),
    "P3-tau2-alpha.3-M3-H6": dict(
        streaming=StreamingConfig(fragments=3, overlap=2, alpha=0.3),
        learners=3,
        H=6,
        steps=17,
    ),
    "P4-no-final-sync-betas": dict(
        streaming=StreamingConfig(fragments=4, overlap=3, alpha=0.8),
        final_sync=False,
        inner_betas=(0.8, 0.999),
        inner_eps=1e-6,
        steps=11,
    ),
    "P2-fp8": dict(streaming=StreamingConfig(fragments=2, overlap=1, alpha=0.5, quantize="fp8")),
    "P2-int4-contiguous": dict(
        streaming=StreamingConfig(
            fragments=2, overlap=0, alpha=0.25, quantize="int4", layout="contiguous"
        )
    ),
    "P3-contiguous-5-blocks": dict(
        streaming=StreamingConfig(fragments=3, overlap=1, alpha=0.5, layout="contiguous"),
        model=ModelConfig(layers=5),
        H=5,
        steps=13,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fragments_equal_reference(tmp_path, case):
    cfg = config(**CASES[case])
    net = ref.TinyNet(blocks=cfg.model.layers)
    ours, syncs = run_threads(cfg, tmp_path, net)
    want = ref.run(ref.recipe_of(cfg), net, ref.Batches())
    assert ref.max_abs_diff(ours, want, net) <= TOL
    P = cfg.streaming.fragments
    assert {s["fragment"] for s in syncs} == set(range(P))
    ends_apart = max_diff(ours[:1], ours[1:2])  # the final sync puts all on the global θ
    assert ends_apart == 0.0 if cfg.final_sync else ends_apart > 1e-6


def test_controls_differ(tmp_path):
    """The reference with one hyper-parameter changed is far from our run: the comparison
    above can fail."""
    cfg = config(streaming=StreamingConfig(fragments=2, overlap=1, alpha=0.5))
    ours, _ = run_threads(cfg, tmp_path)
    net = ref.TinyNet(blocks=BLOCKS)
    changes = [
        dict(fragments=1), dict(fragments=4), dict(tau=0), dict(tau=2), dict(alpha=0.4),
        dict(H=5), dict(offsets=(1, 3)), dict(quantize="fp8"), dict(betas=(0.9, 0.999)),
    ]  # fmt: skip
    diffs = [
        ref.max_abs_diff(ours, ref.run(ref.recipe_of(cfg, **c), net, ref.Batches()), net)
        for c in changes
    ]
    assert min(diffs) > 1e-6, dict(zip(map(str, changes), diffs, strict=True))


def test_resume_with_a_fragment_in_flight(tmp_path):
    """A checkpoint taken while fragment 1's sync is in flight (started at step 6, merged
    at 7) resumes to the uninterrupted run's parameters."""
    s = StreamingConfig(fragments=2, overlap=1, alpha=0.5)
    full, _ = run_threads(config(s), tmp_path / "full")
    run_threads(config(s, steps=8, checkpoint_every=6, final_sync=False), tmp_path / "cut")
    resumed, _ = run_threads(config(s, checkpoint_every=6), tmp_path / "cut", resume_step=6)
    assert max_diff(resumed, full) == 0.0


# ---- fragments and schedule ------------------------------------------------------------------
def test_block_groups_and_offsets():
    assert block_groups(7, 3, "strided") == [[0, 3, 6], [1, 4], [2, 5]]
    assert block_groups(7, 3, "contiguous") == [[0, 1, 2], [3, 4], [5, 6]]
    assert offsets(10, 3) == [0, 3, 6] and offsets(4, 4) == [0, 1, 2, 3]
    assert [t for t in range(12) if starts_at(t, 3, 5)] == [3, 8]
    assert [t for t in range(12) if starts_at(t, 0, 5)] == [5, 10]


@pytest.mark.parametrize("layout", ["strided", "contiguous"])
def test_fragment_params_partition_the_model(layout):
    net = ref.TinyNet(blocks=5)
    frags = fragment_params(net, 2, layout)
    names = [n for n, _ in net.named_parameters()]
    assert sorted(i for f in frags for i in f) == list(range(len(names)))
    assert {names[i] for i in frags[0]} >= {"inp.weight", "inp.bias", "out.weight", "out.bias"}
    blocks_of = [
        {names[i].split(".")[1] for i in f if names[i].startswith("blocks")} for f in frags
    ]
    want = [{"0", "2", "4"}, {"1", "3"}] if layout == "strided" else [{"0", "1", "2"}, {"3", "4"}]
    assert blocks_of == want


def test_fragment_params_errors_name_the_field():
    with pytest.raises(ConfigError) as e:
        fragment_params(ref.TinyNet(blocks=2), 3, "strided")
    assert e.value.field == "streaming.fragments"
    with pytest.raises(ConfigError) as e:
        fragment_params(torch.nn.Linear(2, 2), 1, "strided")
    assert e.value.field == "streaming"


# ---- (d) quantisation --------------------------------------------------------------------------
def _values(draw_dtype):
    finite = st.floats(-1e30, 1e30, allow_nan=False, allow_infinity=False)
    return arrays(draw_dtype, st.integers(1, 64), elements=finite)


@pytest.mark.parametrize("mode", ["fp8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@given(data=st.data())
def test_quantisation_within_bound(mode, dtype, data):
    x = torch.from_numpy(data.draw(_values(np.float64))).to(dtype)
    x = x * data.draw(st.sampled_from([1.0, 1e-3, 1e-20]))
    payload, s = q.quantize(x, mode)
    assert payload.dtype == torch.uint8 and payload.numel() == q.payload_len(x.numel(), mode)
    xh = q.dequantize(payload, s, mode, x.shape)
    assert xh.dtype == dtype
    assert bool(((xh - x).abs() <= q.bound(x, s, mode)).all())


@pytest.mark.parametrize("mode", ["fp8", "int4"])
def test_quantisation_bound_is_nearly_attained(mode):
    """On 10^4 normal values the worst error reaches 90% of the bound: a bound half as
    large is violated, so the property test above can fail."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10_000, generator=g, dtype=torch.float64)
    payload, s = q.quantize(x, mode)
    ratio = (q.dequantize(payload, s, mode, x.shape) - x).abs() / q.bound(x, s, mode)
    assert 0.9 < float(ratio.max()) <= 1.0


def test_zero_tensor_round_trips_exactly():
    for mode in ("fp8", "int4"):
        x = torch.zeros(5, dtype=torch.float64)
        payload, s = q.quantize(x, mode)
        assert float(s) == 1.0 and torch.equal(q.dequantize(payload, s, mode, x.shape), x)


@given(st.lists(st.integers(-8, 7), min_size=0, max_size=41))
def test_int4_packing_round_trips(values):
    v = torch.tensor(values, dtype=torch.int8)
    packed = q.pack_int4(v)
    assert packed.dtype == torch.uint8 and packed.numel() == (len(values) + 1) // 2
    assert torch.equal(q.unpack_int4(packed, len(values)), v)


# ---- (e) configuration -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "field"),
    [
        (dict(H=4, streaming=dict(overlap=4)), "streaming.overlap"),
        (dict(streaming=dict(fragments=5)), "streaming.fragments"),  # 4 layers
        (dict(H=2, streaming=dict(fragments=3, overlap=0), model=dict(layers=8)),
         "streaming.fragments"),
        (dict(streaming=dict(alpha=1.5)), "streaming.alpha"),
        (dict(streaming=dict(quantize="fp4")), "streaming.quantize"),
        (dict(streaming={}, reset_inner_optimizer=True), "reset_inner_optimizer"),
        (dict(inner_betas=[0.9, 1.0]), "inner_betas.1"),
        (dict(inner_eps=0.0), "inner_eps"),
    ],
)  # fmt: skip
def test_config_errors_name_the_field(data, field):
    with pytest.raises(ConfigError) as e:
        validate(TrainConfig, dict(shaping=None, unshaped_ok=True) | data)
    assert e.value.field == field


def test_inner_defaults_unchanged():
    cfg = TrainConfig(shaping=None, unshaped_ok=True)
    assert cfg.inner_betas == (0.9, 0.95) and cfg.inner_eps == 1e-8 and cfg.streaming is None
    assert cfg.inner_eps == torch.optim.AdamW([torch.zeros(1)]).defaults["eps"]


# ---- slow: real processes over gloo -----------------------------------------------------------
@pytest.mark.slow
def test_real_processes_equal_reference_and_diloco(tmp_path):
    from trainfabric.diloco.train.launch import train

    net, batches = ref.TinyNet(blocks=BLOCKS), ref.Batches()
    cfg = config(StreamingConfig(fragments=2, overlap=1, alpha=0.5), save_final=True)
    res = train(cfg, tmp_path / "s", model=net, batch=batches)
    assert res.params == sum(p.numel() for p in net.parameters())  # the model it trained
    ours = [torch.load(tmp_path / "s" / f"final-rank{r}.pt") for r in range(2)]
    assert ref.max_abs_diff(ours, ref.run(ref.recipe_of(cfg), net, batches), net) <= TOL
    one = config(StreamingConfig(fragments=1, overlap=0, alpha=0.0), save_final=True)
    train(one, tmp_path / "one", model=net, batch=batches)
    train(config(None, save_final=True), tmp_path / "d", model=net, batch=batches)
    a = [torch.load(tmp_path / "one" / f"final-rank{r}.pt") for r in range(2)]
    b = [torch.load(tmp_path / "d" / f"final-rank{r}.pt") for r in range(2)]
    assert max_diff(a, b) <= TOL
