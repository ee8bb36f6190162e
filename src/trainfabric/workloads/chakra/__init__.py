"""Chakra execution traces (MLCommons) in and out.

* :mod:`~trainfabric.workloads.chakra.schema`: the published schema, built from its field
  numbers, and the length-delimited stream;
* :mod:`~trainfabric.workloads.chakra.trace`: :func:`read_trace` (a folder of
  ``NAME.RANK.et`` files, one of them, or ``folder/NAME``) with its checks, and
  :func:`trace_counts`;
* :mod:`~trainfabric.workloads.chakra.convert`: :func:`trace_dag`, the trace as a task DAG
  (GPU transfers kept, pods of ``gpus_per_pod`` ranks), and :func:`load_chakra`, the three
  in one call for ``workloads show`` and the pillars;
* :mod:`~trainfabric.workloads.chakra.writer`: :func:`write_trace`, a task DAG as a trace
  that astra-sim runs.

**Counts** (:func:`trace_counts`), as the files state them: ``ranks`` (files),
``collectives`` (``COMM_COLL_NODE`` s: a collective on ``R`` ranks counts ``R`` times, once
per rank's node), ``collective_bytes`` (the sum of those nodes' ``comm_size``),
``p2p_messages`` and ``p2p_bytes`` (the send side: ``COMM_SEND_NODE`` s and the sum of their
``comm_size``), ``compute_nodes`` (``COMP_NODE`` s).
"""

from trainfabric.workloads.chakra.convert import dp_gradient_bytes, load_chakra, trace_dag
from trainfabric.workloads.chakra.trace import ChakraTrace, read_trace, trace_counts
from trainfabric.workloads.chakra.writer import WrittenTrace, write_trace

__all__ = [
    "ChakraTrace",
    "WrittenTrace",
    "dp_gradient_bytes",
    "load_chakra",
    "read_trace",
    "trace_counts",
    "trace_dag",
    "write_trace",
]
