"""cp tasks over the two ends of a copy, chunk and range plans, kernel-side and S3 multipart big files."""
