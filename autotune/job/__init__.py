"""The whole training job: step time, throughput, utilisation and memory
per chip of one plan (data, pipeline and tensor parallelism together)."""
