"""Pipeline stage balancing: layers and recomputation per stage and chunk
(seed 004's ILP extension), its schedule simulator and memory decomposition."""
