"""Learner islands: the cost of an outer sync and the progress lost by deferring it.

**Sync cost** (:class:`SyncModel`): an outer sync all-reduces the pseudo-gradients (``params``
x ``bytes_per_param``) over ``M`` islands by a ring (the steps and bytes of
:func:`trainfabric.workloads.collectives.ring_all_reduce`): ``2(M−1)`` steps of ``S/M`` bytes
at ``link_gbps`` each plus ``step_latency_s``, then the outer optimiser step (Nesterov momentum
on the averaged pseudo-gradient, ``outer_step_s``). Training pauses while it runs. Defaults:
1B parameters in fp32, 8 islands, 100 Gb/s between islands: ``0.56 s``.

**Progress** (:class:`ProgressModel`): each island takes ``steps_per_s`` inner steps of
``tokens_per_step`` tokens (all islands together). The inner steps of an interval of ``h``
steps reach the global model only at the next outer sync, and the islands drift apart while
they run, so an interval counts as ``h · tokens_per_step · e(h)`` effective tokens with

    e(h) = 1 / (1 + h / drift_steps)                                (DiLoCo interval efficiency)

and the model's loss follows the Chinchilla fit (Hoffmann et al. 2022) at ``params``::

    L(D) = E + A / N^α + B / D^β,   E = 1.69, A = 406.4, α = 0.34, B = 410.7, β = 0.28.

``drift_steps = 2000`` makes H = 500 cost 20% of an interval's tokens, the order of the
perplexity gap between H = 50 and H = 500 in DiLoCo (Douillard et al. 2023, fig. 3)
*(assumption; the real-training issue fits it)*. The seed's artifact averages deltas without
an outer optimiser; ``seed_compat`` scales its efficiency by ``averaging_efficiency``
*(assumption, 0.85: DiLoCo reports outer Nesterov clearly ahead of plain averaging)*.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from trainfabric.config import Config
from trainfabric.workloads.collectives import ring_all_reduce

CHINCHILLA = {"E": 1.69, "A": 406.4, "alpha": 0.34, "B": 410.7, "beta": 0.28}


class SyncModel(Config):
    """An outer sync: ring all-reduce of the pseudo-gradients, then the outer step."""

    params: float = Field(1e9, gt=0, description="model parameters")
    bytes_per_param: float = Field(4.0, gt=0, description="pseudo-gradient bytes (fp32)")
    islands: int = Field(8, ge=2, le=4096, description="learner islands M")
    link_gbps: float = Field(100.0, gt=0, description="inter-island rate per island")
    step_latency_s: float = Field(50e-6, ge=0, description="per ring step")
    outer_step_s: float = Field(0.005, ge=0, description="outer Nesterov step")

    def duration_s(self) -> float:
        """Seconds one sync occupies the islands' network and pauses training."""
        steps = ring_all_reduce(np.arange(self.islands), self.params * self.bytes_per_param)
        rate = self.link_gbps * 1e9
        ring = sum(8.0 * float(s.bytes.max()) / rate + self.step_latency_s for s in steps)
        return ring + self.outer_step_s


class ProgressModel(Config):
    """Inner-step throughput, interval efficiency and the loss curve (module doc)."""

    steps_per_s: float = Field(1.0, gt=0, description="inner steps per second")
    tokens_per_step: float = Field(4.0e6, gt=0, description="tokens per step, all islands")
    drift_steps: float = Field(2000.0, gt=0, description="e(h) = 1 / (1 + h / drift_steps)")
    averaging_efficiency: float = Field(0.85, gt=0, le=1, description="seed_compat only")

    def efficiency(self, h) -> np.ndarray:
        return 1.0 / (1.0 + np.asarray(h, float) / self.drift_steps)

    def loss(self, tokens, params: float) -> np.ndarray:
        """Chinchilla loss after ``tokens`` effective tokens at ``params`` parameters."""
        c = CHINCHILLA
        d = np.maximum(np.asarray(tokens, float), 1.0)
        return c["E"] + c["A"] / params ** c["alpha"] + c["B"] / d ** c["beta"]
