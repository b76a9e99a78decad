"""Engine-free file operations: what to do to one chunk of a tree.

Nothing here imports Dask or Airflow; the engine (``dask_pfs``) ships these functions to
workers, and anything else (a thread pool, a test, another scheduler) can call them directly.
"""
