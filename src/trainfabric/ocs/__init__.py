"""OCS pillar: entropic wiring of pods through s parallel optical circuit switches.

See ``../shared/specs/ocs.md``; modules: :mod:`.model` (pods, ports, OCSes), :mod:`.cost`
(smoothed critical path), :mod:`.projection` and :mod:`.prior` (KL geometry of the degree
slice), :mod:`.solver` (entropic proximal gradient), :mod:`.rounding` and :mod:`.decompose`
(integer wiring, per-OCS cross-connects), :mod:`.milp` and :mod:`.baselines`.
"""
