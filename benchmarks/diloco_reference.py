"""Our DiLoCo against an independent open-source DiLoCo on identical inputs.

The reference is torchft's ``DiLoCo`` (``torchft/local_sgd.py``, BSD-3, Meta), loaded from a
checkout given by ``--reference`` and run *unmodified*; nothing of it is copied here. Its
``Manager`` (quorum, fault tolerance, a Rust extension) is replaced by a stand-in whose
``allreduce`` does what torchft's does for the default ``ReduceOp.AVG`` (sum over the
replicas, then ``/= num_participants``), across ``M`` learner threads in this process; every
other call (``should_commit`` is always true: no failures) is a no-op. Both sides start from
the same initial parameters (``torch.manual_seed(seed)``), draw the same batches (learner
``r``'s generator), use the same inner AdamW and outer ``SGD(lr 0.7, momentum 0.9,
nesterov)``; ours runs as real learner processes over gloo (loopback). The result is the
largest absolute parameter difference after ``N`` outer steps, in float64 (bar 1e-12) and
float32, plus a negative control (the reference with outer lr 0.69) that must differ.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, parser  # noqa: E402

from trainfabric.diloco.train.config import ModelConfig, TrainConfig  # noqa: E402
from trainfabric.diloco.train.launch import train  # noqa: E402
from trainfabric.diloco.train.learner import data_generator, sample  # noqa: E402
from trainfabric.diloco.train.model import GPT  # noqa: E402
from trainfabric.io import dumps  # noqa: E402

MODEL = ModelConfig(layers=2, d_model=32, heads=2, context=32)


def load_reference(root: Path):
    """torchft/local_sgd.py from ``root``, with stand-ins for the torchft package and its
    Manager module (the real ones need torchft's compiled extension)."""
    path = root / "torchft" / "local_sgd.py"
    pkg = types.ModuleType("torchft")
    pkg.__path__ = []
    mgr = types.ModuleType("torchft.manager")
    mgr.Manager = object
    sys.modules.setdefault("torchft", pkg)
    sys.modules.setdefault("torchft.manager", mgr)
    spec = importlib.util.spec_from_file_location("torchft_local_sgd_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, hashlib.sha256(path.read_bytes()).hexdigest()


class _Done:
    def __init__(self, tensor):
        self.fut = torch.futures.Future()
        self.fut.set_result([tensor])

    def wait(self, timeout=None):
        return True

    def get_future(self):
        return self.fut


class ThreadManager:
    """torchft Manager stand-in: AVG all-reduce (sum in rank order, ``/= M``) over threads."""

    _use_async_quorum = False

    def __init__(self, rank, world, shared):
        self.rank, self.world, self.shared = rank, world, shared

    def allreduce(self, tensor, should_quantize=False):
        sh = self.shared
        sh["slots"][self.rank] = tensor
        sh["barrier"].wait()
        if self.rank == 0:
            total = sh["slots"][0].clone()
            for t in sh["slots"][1:]:
                total += t
            total /= self.world
            sh["result"] = total
        sh["barrier"].wait()
        tensor.copy_(sh["result"])
        sh["barrier"].wait()
        return _Done(tensor)

    def should_commit(self):
        return True

    def current_step(self):
        return 0

    def start_quorum(self):
        pass

    def register_state_dict_fn(self, *args):
        pass

    def allow_state_dict_read(self):
        pass

    def disallow_state_dict_read(self):
        pass


def run_reference(ref, cfg: TrainConfig, data: torch.Tensor, outer_lr: float):
    dtype = getattr(torch, cfg.dtype)
    shared = {"slots": [None] * cfg.learners, "barrier": threading.Barrier(cfg.learners)}
    finals: list = [None] * cfg.learners
    errors: list = []
    models = []
    for _ in range(cfg.learners):  # here, not in the threads: the global RNG is shared
        torch.manual_seed(cfg.seed)
        models.append(GPT(cfg.model).to(dtype))

    def learner(rank):
        try:
            model = models[rank]
            inner = torch.optim.AdamW(
                model.parameters(), lr=cfg.inner_lr, betas=(0.9, 0.95),
                weight_decay=cfg.weight_decay,
            )  # fmt: skip
            outer = torch.optim.SGD(
                model.parameters(), lr=outer_lr, momentum=cfg.outer_momentum, nesterov=True
            )
            gen = data_generator(cfg.seed, rank)
            manager = ThreadManager(rank, cfg.learners, shared)
            with ref.DiLoCo(manager, [model], inner, outer, sync_every=cfg.H, pin_memory=False):
                for _ in range(cfg.steps):
                    x, y = sample(data, gen, cfg.batch, cfg.model.context)
                    inner.zero_grad()
                    model.loss(x, y).backward()
                    inner.step()
            finals[rank] = [p.detach().clone() for p in model.parameters()]
        except BaseException as exc:  # re-raised below
            errors.append(exc)
            shared["barrier"].abort()

    threads = [threading.Thread(target=learner, args=(r,)) for r in range(cfg.learners)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return finals


def max_diff(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def compare(ref, dtype: str, learners: int, H: int, outer_steps: int, work: Path) -> dict:
    cfg = TrainConfig(
        learners=learners, steps=H * outer_steps, H=H, control_window_s=0.0, batch=4,
        model=MODEL, dtype=dtype, checkpoint_every=10**6, eval_batches=1,
        corpus_bytes=50_000, shaping=None, unshaped_ok=True, save_final=True,
    )  # fmt: skip
    run_dir = work / dtype
    t0 = time.perf_counter()
    res = train(cfg, run_dir)
    ours_s = time.perf_counter() - t0
    ours = [torch.load(run_dir / f"final-rank{r}.pt") for r in range(learners)]
    data = torch.from_numpy(np.fromfile(run_dir / "train.bin", np.uint8)).long()
    t0 = time.perf_counter()
    theirs = run_reference(ref, cfg, data, cfg.outer_lr)
    ref_s = time.perf_counter() - t0
    control = run_reference(ref, cfg, data, cfg.outer_lr - 0.01)
    torch.manual_seed(cfg.seed)
    init = [p.detach() for p in GPT(cfg.model).to(getattr(torch, dtype)).parameters()]
    return {
        "max_abs_diff": max(max_diff(o, t) for o, t in zip(ours, theirs, strict=True)),
        "max_abs_diff_between_our_learners": max_diff(ours[0], ours[-1]),
        "control_outer_lr_0.69_max_abs_diff": max_diff(ours[0], control[0]),
        "max_abs_param_change_from_init": max_diff(ours[0], init),
        "syncs": res.syncs,
        "inner_steps": res.steps,
        "ours_s": round(ours_s, 2),
        "reference_s": round(ref_s, 2),
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--reference",
        type=Path,
        default=Path(os.environ.get("TORCHFT_PATH", "/tmp/torchft")),
        help="torchft checkout root [env TORCHFT_PATH, else /tmp/torchft]",
    )
    p.add_argument("--reference-commit", default=None, help="the checkout's commit (recorded)")
    p.add_argument("--learners", type=int, default=2)
    p.add_argument("--H", type=int, default=5)
    p.add_argument("--outer-steps", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    if not (args.reference / "torchft" / "local_sgd.py").is_file():
        # nothing is downloaded here: without a checkout, say so (and keep the committed result)
        reason = f"no torchft checkout at {args.reference} (pass --reference or TORCHFT_PATH)"
        sys.stdout.write(dumps({"benchmark": "diloco_reference", "ran": False, "reason": reason}))
        sys.stdout.write("\n")
        return
    ref, digest = load_reference(args.reference)
    with tempfile.TemporaryDirectory() as tmp:
        results = {
            dt: compare(ref, dt, args.learners, args.H, args.outer_steps, Path(tmp))
            for dt in ("float64", "float32")
        }
    f64 = results["float64"]
    emit(
        "diloco_reference",
        {
            "reference": "pytorch/torchft torchft/local_sgd.py DiLoCo (BSD-3), run unmodified",
            "reference_commit": args.reference_commit,
            "ran": True,
            "reference_sha256": digest,
            "learners": args.learners,
            "H": args.H,
            "outer_steps": args.outer_steps,
            "model": MODEL.model_dump(),
            "float64": f64,
            "float32": results["float32"],
            "float64_within_1e-12": f64["max_abs_diff"] <= 1e-12,
            "control_differs": f64["control_outer_lr_0.69_max_abs_diff"] > 1e-6,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
