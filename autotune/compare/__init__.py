"""`meshtune compare`: MeshSlice against the 2D and 1D baselines over chip
counts, its JSON document and its terminal rendering."""
