"""What every chunk's I/O runs on: directory descriptors, the per-process pool and its auto-tuned width."""
