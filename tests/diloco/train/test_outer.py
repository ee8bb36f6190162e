"""The DiLoCo outer step in-process: bucketing, averaging of pseudo-gradients, and the
Nesterov outer update against a hand computation."""

import numpy as np
import pytest
import torch

from trainfabric.diloco.train.outer import buckets, make_outer, outer_step, pseudo_gradient


def _fake_world(locals_per_rank):
    """A reducer that sums the flattened bucket over simulated learners (rank 0 is the one
    whose call we observe; the other ranks' buffers are recomputed from their params)."""

    def make(global_params, bucket_bytes):
        calls = iter(buckets(global_params, bucket_bytes))

        def reduce(flat):
            idx = next(calls)
            total = torch.zeros_like(flat)
            for params in locals_per_rank:
                total += torch.cat([(global_params[i] - params[i]).reshape(-1) for i in idx])
            flat.copy_(total)

        return reduce

    return make


def test_buckets_respect_size_and_order():
    ps = [torch.zeros(n, dtype=torch.float64) for n in (10, 10, 30, 5, 1)]
    b = buckets(ps, 8 * 20)
    assert b == [[0, 1], [2], [3, 4]]
    assert [i for bb in b for i in bb] == list(range(5))


@pytest.mark.parametrize("bucket_bytes", [8.0, 1e9])
def test_pseudo_gradient_is_mean_of_differences(bucket_bytes):
    g = torch.Generator().manual_seed(1)
    glob = [torch.randn(3, 4, generator=g, dtype=torch.float64), torch.randn(5, generator=g)]
    glob[1] = glob[1].double()
    locs = [[p + torch.randn(p.shape, generator=g, dtype=p.dtype) for p in glob] for _ in range(3)]
    reduce = _fake_world(locs)(glob, bucket_bytes)
    delta, nbytes = pseudo_gradient(glob, locs[0], reduce, 3, bucket_bytes)
    for i, p in enumerate(glob):
        want = sum(p - loc[i] for loc in locs) / 3
        assert torch.allclose(delta[i], want, atol=0, rtol=1e-15)
    assert nbytes == 17 * 8


def test_outer_nesterov_matches_hand_computation():
    """Two outer steps with lr 0.7, momentum 0.9, Nesterov, by hand:
    b1 = Δ1, θ1 = θ0 − lr (Δ1 + μ b1); b2 = μ b1 + Δ2, θ2 = θ1 − lr (Δ2 + μ b2)."""
    lr, mu = 0.7, 0.9
    rng = np.random.default_rng(3)
    theta0 = rng.normal(size=6)
    local_moves = [rng.normal(size=(2, 6)) * 0.1 for _ in range(2)]  # per step, per learner
    glob = [torch.tensor(theta0)]
    opt = make_outer(glob, lr, mu, True)
    theta, buf = theta0.copy(), None
    for moves in local_moves:
        locs = [[glob[0].detach().clone() - torch.tensor(m)] for m in moves]
        delta = np.mean(moves, axis=0)  # θ − θ_r = m_r
        buf = delta if buf is None else mu * buf + delta
        theta = theta - lr * (delta + mu * buf)
        mine = [p.clone() for p in locs[0]]
        outer_step(glob, mine, opt, _fake_world(locs)(glob, 1e9), 2, 1e9)
        assert np.allclose(glob[0].numpy(), theta, atol=1e-15, rtol=0)
        assert torch.equal(mine[0], glob[0])  # every learner restarts from the new global
    # plain SGD would give a different point: the momentum terms matter
    plain = theta0 - lr * sum(np.mean(m, axis=0) for m in local_moves)
    assert not np.allclose(theta, plain, atol=1e-3)


def test_outer_without_momentum_is_plain_sgd():
    glob = [torch.tensor([1.0, 2.0], dtype=torch.float64)]
    loc = [torch.tensor([0.5, 1.0], dtype=torch.float64)]
    opt = make_outer(glob, 1.0, 0.0, True)  # nesterov needs momentum: falls back to plain
    outer_step(glob, [loc[0].clone()], opt, _fake_world([loc])(glob, 1e9), 1, 1e9)
    assert glob[0].tolist() == [0.5, 1.0]  # lr 1, H steps -> exactly the learner's params
