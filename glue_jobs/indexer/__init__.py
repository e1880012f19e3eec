"""The index job: per-segment index companions for /v1 streams' search (headwater.index)."""
