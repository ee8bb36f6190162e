"""Issue 18: the iteration of a small configuration on the packet engine, beside the flow engine
on the same flow table and the task engine on the exact DAG.

Job: the 32-server ``llama3-70b`` preset cut to 2 layers (TP8 x PP4 x DP8, 1F1B, 8
micro-batches; 256 GPUs), servers placed at random (seed 0) on the fabric of the faults job of
``benchmarks/fabric_iteration.py`` (4 planes of radix 32, 200 Gb/s ports, 800 Gb/s NICs, so that
the job spreads over 16 leaves per plane), one connection per GPU pair (the translated flow
table's edges grow as the square of a phase's flows). The DAG becomes a flow table with
dependencies (:func:`trainfabric.fabric.iteration.packet.dag_flow_table`: compute as delays,
relays for unequal compute paths); the packet engine runs it with its default configuration
(NDP-like transport, trimming, 35-packet queues, 4096 B MTU + 64 B headers) with its bound on
data packets raised to ``MAX_PACKETS`` (the iteration moves about 92 M). Per mode:
``packet_s`` (packet engine), ``flow_table_s`` (the flow engine on the same table: the engines
compared on equal input), ``task_engine_s`` (the exact DAG: the translation's effect), packet
counts and each engine's wall time. ``--quick`` runs ECMP and spray; the full run adds adaptive.
"""

from __future__ import annotations

import time

from _common import emit, parser, peak_rss_gb

JOB = {"workload": "llama3-70b", "pods": 32, "layers": 2, "switch_radix": 32}
MAX_PACKETS = 200_000_000


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--modes", nargs="+", default=None, help="load-balancing modes")
    args = p.parse_args()
    from trainfabric.fabric.iteration import run as I
    from trainfabric.fabric.iteration.packet import packet_iteration
    from trainfabric.fabric.iteration.scenario import job_fabric
    from trainfabric.fabric.packet.config import PacketConfig

    modes = args.modes or (["ecmp", "spray"] if args.quick else ["ecmp", "spray", "adaptive"])
    t0 = time.perf_counter()
    loaded = I.load_job(JOB["workload"], pods=JOB["pods"], layers=JOB["layers"], seed=0)
    topo = job_fabric(loaded.pods, loaded.gpus_per_pod, switch_radix=JOB["switch_radix"])
    servers = I.place_servers(topo, loaded.pods, loaded.gpus_per_pod, "random", 0)
    jh = I.JobOnHosts(loaded, servers, 1, seed=0)
    config = PacketConfig(max_packets=MAX_PACKETS)
    rows = {}
    for mode in modes:
        t = time.perf_counter()
        row = packet_iteration(jh, topo, mode, seed=0, config=config)
        rows[mode] = row | {"wall_s": time.perf_counter() - t}
    emit(
        "fabric_iteration_packet",
        {
            "job": JOB | {"gpus": int(loaded.pods * loaded.gpus_per_pod), "channels": 1},
            "max_packets": MAX_PACKETS,
            "modes": rows,
            "packet_over_task_engine": {
                m: r["packet_s"] / r["task_engine_s"] for m, r in rows.items()
            },
            "packet_over_flow_table": {
                m: r["packet_s"] / r["flow_table_s"] for m, r in rows.items()
            },
            "total_wall_s": time.perf_counter() - t0,
            "peak_rss_gb": peak_rss_gb(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
