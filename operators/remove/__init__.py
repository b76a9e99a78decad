"""rm tasks over a backend per file system (local: the compiled core; fsspec), and their counters."""
