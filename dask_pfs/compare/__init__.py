"""Jobs over two sides: verify, diff, and sync (a job of jobs that plans, then runs remove and copy)."""
