"""aviso-compatible notifications (/api/v1): schemas, identifier handlers, request validation,
filters and CloudEvents. Pure logic: no HTTP, no storage (see docs/notifications.md)."""
