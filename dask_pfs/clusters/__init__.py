"""Where a job runs: a given client, a scheduler address, an embedded LocalCluster, Slurm or Kubernetes; TLS."""
