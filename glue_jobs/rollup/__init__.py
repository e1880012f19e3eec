"""Per-topic rollups from sealed S3 segments (a Glue 5.0 / Spark 3.5 job).

transforms.py: pure DataFrame functions (no I/O); job.py: arguments, S3 listing/fetching,
writing the rollup objects and the manifest; spark.py: building a session (Glue or local)."""
