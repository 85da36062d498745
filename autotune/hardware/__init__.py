"""The hardware layer: from cluster and calibration specs to the cost models
the planner prices with."""
