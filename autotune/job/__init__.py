"""The whole training job: step time and memory, and the joint tensor x
pipeline x data-parallel search."""
