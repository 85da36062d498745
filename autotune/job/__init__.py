"""The whole training job: step time, throughput, utilisation and memory
per chip of one plan (data, pipeline and tensor parallelism together), and
the joint tensor x pipeline x data-parallel search."""
