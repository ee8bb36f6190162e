"""Multiplane Ethernet fabrics (Spectrum-X style): topologies, load balancing, flow-level engine."""
