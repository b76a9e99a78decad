"""What every driver stands on: the Submitter, job-wide limits, progress, results, journals and locks."""
