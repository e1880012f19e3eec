"""The dashboard feed (/api/v2): sentiment items, metrics, configurations and their SSE
streams (docs/dashboard.md)."""
