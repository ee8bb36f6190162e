"""Streaming DiLoCo (Douillard et al., 2025, "Streaming DiLoCo with overlapping
communication", arXiv 2501.18512) on the DiLoCo outer step of :mod:`.outer`.

**Fragments.** The model's blocks (its ``blocks`` ``nn.ModuleList``) are split into ``P``
fragments: strided (the paper's choice, fragment ``p`` holds blocks ``p, p+P, p+2P, ...``) or
contiguous (consecutive runs, the first ``n mod P`` one block longer). The parameters outside
the blocks (embeddings, final norm) join fragment 0.

**Schedule.** Fragment ``p`` has the offset ``o_p = ⌊p·H/P⌋`` (rounded down) and starts a
sync after inner step ``t ≥ 1`` when ``(t − o_p) mod H = 0``: every fragment syncs every
``H`` steps, the fragments staggered evenly (``P = 1``: after steps ``H, 2H, ...``, as DiLoCo).

**A sync of fragment p started at step t** (every learner ``r`` in lockstep):

1. each learner's outer gradient ``Δ_{p,r} = θ_p − θ_{p,r}`` (global minus local parameters,
   this fragment only) goes into a collective started now and not waited for: a
   full-precision sum ``all_reduce`` in buckets (as :func:`.outer.pseudo_gradient`) or,
   quantised, an ``all_gather`` of every learner's payload (see below);
2. the learners go on with ``τ`` (``overlap``) inner steps, ``t+1 .. t+τ``, while it runs;
3. after step ``t+τ`` the collective is waited for, ``Δ_p = (1/M) Σ_r Δ_{p,r}`` is applied by
   the fragment's own outer optimiser (Nesterov SGD, momentum per fragment) to ``θ_p``, and
   every learner merges: ``θ_{p,r} ← α·θ_{p,r} + (1 − α)·θ_p`` (``α`` the mixing factor;
   ``α = 0``: the global parameters replace the local ones, whose ``τ`` steps are dropped).

With ``P = 1``, ``τ = 0``, ``α = 0`` and no quantisation this is DiLoCo's sync operation for
operation (same buckets, same reduce, same outer step). At the end of training the fragments
in flight complete (step 3 at the last step); with ``final_sync`` every fragment whose local
parameters may differ from the global ones (inner steps since its last merge, or a merge
with ``α > 0``) then syncs once more with no overlap and ``α = 0``, so that every learner
ends on the global parameters.

**Fragment gates** (fragment-level scheduling, :mod:`.controller`): a fragment is *due*
after its scheduled steps above. With a gate (:class:`~.controller.FragmentGate`; the
``Streamer``'s ``gate``, or ``StreamingConfig.defer``'s scripted pattern), each due fragment
is offered to it (:class:`~.controller.FragmentDue`: fragment, step, ``h`` since its last
sync started, steps ``overdue``); open: step 1 above starts now; closed (a deferral): the
fragment stays due and is offered again after every following step until the gate opens —
the sync moves, it is never dropped; its next scheduled step is unchanged (``(t − o_p) mod H
= 0``): one that comes while the fragment is still due adds no second sync, one that comes
while its sync is in flight makes it due again (it is offered after that sync merges). With no
gate (or one always open) this is the fixed schedule, operation for operation. At the end,
``final_sync`` covers the fragments still due (they trained since their last merge).

**Quantisation** (:mod:`.quantize`) is applied by each learner to its own ``Δ_{p,r}``, per
tensor, before anything is sent (that is what saves bandwidth). gloo cannot sum fp8 or
packed int4, so the payloads (scales first, then the quantised bytes) are all-gathered and
every learner dequantises them and sums the dequantised values in rank order, in the working
dtype (identical on every learner). A ring all-gather sends ``(M − 1)×`` one payload per
learner where a ring all-reduce sends ``2(M − 1)/M×`` the full buffer: for ``M = 2`` fp8
moves 4× and int4 8× fewer bytes than float32, and the all-gather stops paying beyond
``M = 8`` (fp8 of float32). ``bytes`` in the sync records is the payload one learner
contributes (scales included), as for DiLoCo's all-reduced buffer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from trainfabric.diloco.train import quantize as q
from trainfabric.diloco.train.config import StreamingConfig
from trainfabric.diloco.train.controller import FragmentDue, FragmentGate, Scripted
from trainfabric.diloco.train.outer import apply_outer, buckets
from trainfabric.errors import ConfigError


class Handle(Protocol):
    def wait(self) -> Any: ...


class Collectives(Protocol):
    """What a fragment sync needs from the learners' group (``world`` learners)."""

    world: int

    def all_reduce(self, flat: torch.Tensor) -> Handle:
        """Start an in-place sum of ``flat`` over the learners."""

    def all_gather(self, buf: torch.Tensor) -> tuple[list[torch.Tensor], Handle]:
        """Start gathering every learner's ``buf`` (same size everywhere), in rank order."""


class _Done:
    def wait(self) -> None:
        return None


DONE = _Done()


class TorchCollectives:
    """:class:`Collectives` over the default ``torch.distributed`` group, asynchronous
    (``async_op=True``): the communication runs while the learner computes."""

    def __init__(self, world: int):
        self.world = world

    def all_reduce(self, flat: torch.Tensor) -> Handle:
        if self.world == 1:
            return DONE
        return dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)

    def all_gather(self, buf: torch.Tensor) -> tuple[list[torch.Tensor], Handle]:
        if self.world == 1:
            return [buf], DONE
        out = [torch.empty_like(buf) for _ in range(self.world)]
        return out, dist.all_gather(out, buf, async_op=True)


# ---- fragments and schedule ---------------------------------------------------------------
def block_groups(n_blocks: int, fragments: int, layout: str) -> list[list[int]]:
    """Block indices of each fragment: strided ``p, p+P, ...`` or contiguous runs."""
    if layout == "strided":
        return [list(range(p, n_blocks, fragments)) for p in range(fragments)]
    base, extra = divmod(n_blocks, fragments)
    sizes = [base + (p < extra) for p in range(fragments)]
    starts = [sum(sizes[:p]) for p in range(fragments)]
    return [list(range(s, s + n)) for s, n in zip(starts, sizes, strict=True)]


def fragment_params(model: nn.Module, fragments: int, layout: str) -> list[list[int]]:
    """Indices into ``list(model.parameters())`` of each fragment's parameters, in order;
    the parameters outside ``model.blocks`` join fragment 0."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ConfigError("streaming", "the model has no `blocks` ModuleList to fragment")
    if fragments > len(blocks):
        raise ConfigError(
            "streaming.fragments", f"must be at most the model's blocks ({len(blocks)})"
        )
    index = {id(p): i for i, p in enumerate(model.parameters())}
    out = []
    for group in block_groups(len(blocks), fragments, layout):
        out.append(sorted(index.pop(id(p)) for b in group for p in blocks[b].parameters()))
    out[0] = sorted(out[0] + list(index.values()))
    return out


def offsets(H: int, fragments: int) -> list[int]:
    """Fragment ``p``'s schedule offset ``⌊p·H/P⌋``."""
    return [p * H // fragments for p in range(fragments)]


def starts_at(step: int, offset: int, H: int) -> bool:
    """Whether a fragment with ``offset`` starts a sync after inner step ``step``."""
    return step >= 1 and (step - offset) % H == 0


# ---- the syncs ------------------------------------------------------------------------------
@dataclass
class Pending:
    """A fragment sync in flight: started after step ``start``, merged after ``due``."""

    fragment: int
    start: int
    due: int
    h: int
    nbytes: int
    t_start: float
    parts: list[tuple[Any, Handle]] = field(default_factory=list)


class Streamer:
    """The fragment syncs of one learner: ``glob`` the global parameters (identical on
    every learner), ``local`` the model's; ``make_outer(params)`` builds a fragment's outer
    optimiser; ``gate`` decides per due fragment (module doc; default: the scripted
    ``cfg.defer``, or none: the fixed schedule). Every learner must see the same decisions
    (a gate deciding on rank 0's view must be broadcast, as the controller's answer is)."""

    def __init__(
        self,
        cfg: StreamingConfig,
        H: int,
        glob: Sequence[torch.Tensor],
        local: Sequence[torch.Tensor],
        frags: list[list[int]],
        make_outer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
        comm: Collectives,
        bucket_bytes: float,
        gate: FragmentGate | None = None,
    ):
        self.cfg, self.H, self.glob, self.local = cfg, H, list(glob), list(local)
        self.frags, self.comm, self.bucket_bytes = frags, comm, bucket_bytes
        self.mode = None if cfg.quantize == "none" else cfg.quantize
        self.offsets = offsets(H, len(frags))
        self.opts = [make_outer([self.glob[i] for i in f]) for f in frags]
        self.last_start = [0] * len(frags)
        self.last_merge = [0] * len(frags)  # step of each fragment's last merge ...
        self.last_alpha = [0.0] * len(frags)  # ... and its α
        self.pending: list[Pending] = []
        self.gate = gate if gate is not None or not cfg.defer else Scripted(cfg.defer)
        self.due_since: dict[int, int] = {}  # fragment -> step it became due (not started)

    def offers(self, step: int) -> list[FragmentDue]:
        """After inner step ``step``: the fragments that may start now (module doc), each
        due (from its scheduled step on, until it starts) with none of its syncs in flight;
        in fragment order, the same on every learner."""
        for p, off in enumerate(self.offsets):
            if starts_at(step, off, self.H):
                self.due_since.setdefault(p, step)
        busy = {pend.fragment for pend in self.pending}
        return [
            FragmentDue(p, step, step - self.last_start[p], step - since)
            for p, since in sorted(self.due_since.items())
            if p not in busy
        ]

    def step(self, step: int, opened: Collection[int] | None = None) -> list[dict]:
        """After inner step ``step``: start the :meth:`offers` that the gate lets through
        (``opened``: the fragments an outside gate opened among them, asked once per step
        for all of them), merge those whose overlap ends now; the merged syncs' records."""
        offers = self.offers(step)
        if opened is None:
            opened = {d.fragment for d in offers if self.gate is None or self.gate.open(d)}
        for due in offers:
            if due.fragment in opened:
                del self.due_since[due.fragment]
                self.pending.append(self.start(due.fragment, step, self.cfg.overlap))
        return self._merge_due(step, self.cfg.alpha)

    def close(self, step: int, final_sync: bool) -> list[dict]:
        """End of training after ``step``: complete the syncs in flight, then (``final_sync``)
        sync every fragment whose locals may differ from the global parameters (trained
        since its last merge, or merged with ``α > 0``) with no overlap and ``α = 0``."""
        for pend in self.pending:
            pend.due = step
        records = self._merge_due(step, self.cfg.alpha)
        if final_sync:
            for p in range(len(self.frags)):
                if self.last_merge[p] < step or self.last_alpha[p] > 0:
                    self.pending.append(self.start(p, step, 0))
            records += self._merge_due(step, 0.0)
        return records

    def busy(self) -> bool:
        return bool(self.pending)

    @torch.no_grad()
    def start(self, p: int, step: int, overlap: int) -> Pending:
        """Send fragment ``p``'s outer gradient ``θ_p − θ_{p,r}`` (collectives started)."""
        idx = self.frags[p]
        pend = Pending(p, step, step + overlap, step - self.last_start[p], 0, time.time())
        self.last_start[p] = step
        if self.mode is None:
            for bucket in buckets([self.glob[i] for i in idx], self.bucket_bytes):
                ids = [idx[j] for j in bucket]
                flat = torch.cat([(self.glob[i] - self.local[i]).reshape(-1) for i in ids])
                pend.parts.append(((ids, flat), self.comm.all_reduce(flat)))
                pend.nbytes += flat.numel() * flat.element_size()
            return pend
        sent = [q.quantize(self.glob[i] - self.local[i], self.mode) for i in idx]
        scales = torch.stack([s for _, s in sent])
        buf = torch.cat([scales.view(torch.uint8)] + [payload for payload, _ in sent])
        gathered, handle = self.comm.all_gather(buf)
        pend.parts.append(((idx, gathered), handle))
        pend.nbytes = buf.numel()
        return pend

    def _merge_due(self, step: int, alpha: float) -> list[dict]:
        due = [pend for pend in self.pending if pend.due <= step]
        self.pending = [pend for pend in self.pending if pend.due > step]
        return [self.finish(pend, step, alpha) for pend in due]

    @torch.no_grad()
    def finish(self, pend: Pending, step: int, alpha: float) -> dict:
        """Wait for ``pend``'s collectives, apply the outer step, merge the locals."""
        world = self.comm.world
        delta: dict[int, torch.Tensor] = {}
        for (ids, got), handle in pend.parts:
            handle.wait()
            if self.mode is None:
                got /= world
                offset = 0
                for i in ids:
                    n = self.glob[i].numel()
                    delta[i] = got[offset : offset + n].view_as(self.glob[i])
                    offset += n
            else:
                delta |= self._dequantized_mean(ids, got)
        idx = self.frags[pend.fragment]
        apply_outer([self.glob[i] for i in idx], [delta[i] for i in idx], self.opts[pend.fragment])
        for i in idx:
            self.local[i].mul_(alpha).add_(self.glob[i], alpha=1 - alpha)
        self.last_merge[pend.fragment], self.last_alpha[pend.fragment] = step, alpha
        t_end = time.time()
        return {
            "fragment": pend.fragment,
            "step_start": pend.start,
            "step": step,
            "t_start": pend.t_start,
            "t_end": t_end,
            "duration_s": t_end - pend.t_start,
            "h": pend.h,
            "bytes": pend.nbytes,
        }

    def _dequantized_mean(
        self, ids: list[int], gathered: list[torch.Tensor]
    ) -> dict[int, torch.Tensor]:
        """``(1/M) Σ_r x̂_r`` per tensor from every learner's payload, summed in rank order."""
        ref = self.glob[ids[0]]
        head = len(ids) * ref.element_size()
        total: dict[int, torch.Tensor] = {}
        for buf in gathered:
            scales = buf[:head].view(ref.dtype)
            offset = head
            for k, i in enumerate(ids):
                shape = self.glob[i].shape
                n = q.payload_len(shape.numel(), self.mode)
                x = q.dequantize(buf[offset : offset + n], scales[k], self.mode, shape)
                total[i] = x if i not in total else total[i] + x
                offset += n
        return {i: t / self.comm.world for i, t in total.items()}

    # ---- checkpoints ------------------------------------------------------------------
    def state(self) -> dict:
        """Outer optimisers, last starts and the syncs in flight (their collectives waited
        for: the merge still happens at its step, on the local parameters of then)."""
        for pend in self.pending:
            for _, handle in pend.parts:
                handle.wait()
            pend.parts = [(payload, DONE) for payload, _ in pend.parts]
        pending = [
            {k: getattr(p, k) for k in ("fragment", "start", "due", "h", "nbytes", "t_start")}
            | {"payloads": [payload for payload, _ in p.parts]}
            for p in self.pending
        ]
        return {
            "opts": [o.state_dict() for o in self.opts],
            "last": [list(self.last_start), list(self.last_merge), list(self.last_alpha)],
            "pending": pending,
            "due_since": sorted(self.due_since.items()),
        }

    def load_state(self, st: dict) -> None:
        for o, s in zip(self.opts, st["opts"], strict=True):
            o.load_state_dict(s)
        self.last_start, self.last_merge, self.last_alpha = (list(x) for x in st["last"])
        self.due_since = {int(p): int(t) for p, t in st.get("due_since", [])}
        self.pending = []
        for p in st["pending"]:
            parts = [(payload, DONE) for payload in p.pop("payloads")]
            self.pending.append(Pending(**p, parts=parts))
