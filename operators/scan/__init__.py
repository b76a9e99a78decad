"""One scan task: the walk, what it leaves out, the local (compiled core) and fsspec listers, the root guard."""
