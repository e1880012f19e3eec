"""The log engine: topics, append with group commit, diff reads, record deletes."""
