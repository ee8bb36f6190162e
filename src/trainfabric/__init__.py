"""trainfabric: plan, simulate and schedule the networks of large AI-training clusters.

Pillars: :mod:`trainfabric.ocs` (optical circuit switch wiring), :mod:`trainfabric.fabric`
(multiplane Ethernet fabrics), :mod:`trainfabric.diloco` (workload-aware DiLoCo), on the shared
substrate :mod:`trainfabric.workloads` (jobs -> task DAGs and traffic) and
:mod:`trainfabric.runs` (sweeps, run directories, reports); :mod:`trainfabric.experiments`
registers the experiments and cross-pillar studies on top.
"""

__version__ = "0.1.0"
