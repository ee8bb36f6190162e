"""DiLoCo testbed: what a sync costs serving when training and serving have separate cores but
share one shaped link.

vLLM (tiny Llama) on core 0 inside learner 0's network namespace, the open-loop load client
(Azure trace segment 22, 0.4 x its rate, fresh prompts each run) on core 0 inside learner 1's
namespace, the two DiLoCo learners (and their launcher) on core 1, syncing every 10 s of
compute over the same tbf-shaped veths that carry the requests and responses. The link's
rate comes from INTELLECT-1's ratio of sync time to inner phase (7 min / 38 min) scaled to the
tiny model (14.5 Mbit/s; derivation in :mod:`trainfabric.diloco.live_testbed`); the queue
depth (tbf latency) is swept over 20, 100 and 400 ms, the headline fixed at 100 ms before
running.

Output keys: ``ttft_inside_over_outside`` (median TTFT of requests whose lifetime overlaps a
sync / median of those that do not) and ``ttft_inside_over_outside_ci`` (95% percentile
bootstrap over requests, pooled over the runs of that depth), the same for TPOT, at the
headline depth, and ``per_queue_ms`` for every depth with each run's own figures (its load
average, queue drops, syncs). Full: 2 runs of 100 s per depth, the first sync's phase drawn
per repetition (~12 min with the server start on a loaded 2-core machine); ``--quick``: 1 run
of 25 s per depth (a smoke run, ~3 min, too few requests inside syncs to conclude anything).
"""

from __future__ import annotations

import os
from pathlib import Path

from _common import emit, parser, peak_rss_gb


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--server", default="vllm", choices=("vllm", "emulator"))
    p.add_argument("--run-dir", type=Path, default=Path("runs/bench-diloco-testbed"))
    args = p.parse_args()
    from rich.console import Console

    from trainfabric.diloco.live_testbed import TestbedConfig, quick_config, run
    from trainfabric.io import prepare_dir

    cfg = quick_config(server=args.server) if args.quick else TestbedConfig(server=args.server)
    console = Console(stderr=True)
    res = run(cfg, prepare_dir(args.run_dir), say=lambda t: console.print(f"testbed: {t}"))
    emit(
        "diloco_testbed",
        {
            "quick": args.quick,
            **res,
            "load_avg_end": round(os.getloadavg()[0], 2),
            "peak_rss_gb": peak_rss_gb(),
            "run_dir": str(args.run_dir),
        },  # fmt: skip
        args.out,
    )


if __name__ == "__main__":
    main()
