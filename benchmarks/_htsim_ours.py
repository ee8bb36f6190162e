"""Our engine as a whole process: the counterpart of ``htsim_ndp`` in the timed pairs of
:func:`_htsim.whole_process_pairs`.

    python benchmarks/_htsim_ours.py --cm FILE.cm --engine packet --mode spray [--seed 0]

Reads the connection matrix (:func:`_htsim.read_cm`), builds the htsim-matched leaf-spine and
flow table, runs the engine to its last event and prints, like htsim, one line per finished
flow on stdout (``flow_id I start_us S finish_us T``, times on htsim's completion definition)
and a last line with the engine call's own wall and CPU seconds (``engine_only_wall_s``) and
``kernel_load_s``. Before the engine call the process runs the same engine and mode on an
8-host scenario of the same shape (with or without dependencies), which loads the compiled
kernels from numba's on-disk cache (``kernel_load_s``), so that the engine call is timed as
the packet engine's headline is (kernels compiled and loaded); the whole process, timed from
outside, includes both. Exits 1 when a flow did not finish (:class:`_htsim.Unfinished`).

The process calls no BLAS: OpenBLAS runs no thread pool (``OPENBLAS_NUM_THREADS=1`` unless
set; numpy's and scipy's pools would otherwise spin beside the single-threaded engine on a
2-core machine). It exits as any Python program does (garbage collector on, interpreter
teardown included).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: no BLAS thread pools

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _htsim as H  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cm", type=Path, required=True, help="htsim connection matrix")
    p.add_argument("--engine", choices=("packet", "flow"), default="packet")
    p.add_argument("--mode", choices=H.OUR_MODES, default="spray")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    sc = H.read_cm(args.cm)
    run = H.packet_completions if args.engine == "packet" else H.flow_completions
    t0 = time.perf_counter()
    dependent = bool((sc.pred >= 0).any())
    tiny = H.ring_chains(8, 1, 3, 8000, seed=1) if dependent else H.permutation(8, 8000, seed=1)
    run(tiny, args.mode, args.seed)
    load = time.perf_counter() - t0
    try:
        start, finish, res, wall, cpu = run(sc, args.mode, args.seed)
    except H.Unfinished as exc:
        print(exc, file=sys.stderr)
        return 1
    lines = [
        f"flow_id {i + 1} start_us {s * 1e6:.6f} finish_us {f * 1e6:.6f}"
        for i, (s, f) in enumerate(zip(start.tolist(), finish.tolist(), strict=True))
    ]
    lines.append(
        f"engine_only_wall_s {wall:.6f} engine_only_cpu_s {cpu:.6f} kernel_load_s {load:.6f}"
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
