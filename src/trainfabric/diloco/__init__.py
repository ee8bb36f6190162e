"""Workload-aware DiLoCo: fleet + serving simulator, sync policies, calibration protocol."""
