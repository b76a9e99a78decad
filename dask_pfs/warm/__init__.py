"""A per-user warm process that runs ``pfs`` commands without paying for Python's imports each time.

``client`` is the console script (it imports nothing heavy), ``server`` the process that has imported
pyarrow, fsspec, DuckDB and every command, ``job`` what a forked child does to become the command,
``identity`` which server a process may use, ``wire`` the messages between them.  docs/performance.md
says why and what it measured.
"""
