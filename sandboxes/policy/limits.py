"""Default sandbox limits, shared by the services and the warm pool (which sizes its
containers as a default sandbox, so a claim usually changes no limit)."""

DEFAULT_CPUS = 1.0
DEFAULT_MEMORY_MB = 512
MIN_MEMORY_MB = 64
DEFAULT_PIDS_LIMIT = 256
# Size of /workspace when neither the request nor the team says otherwise (warm-pool members).
DEFAULT_DISK_MB = 5120
