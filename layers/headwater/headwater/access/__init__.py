"""Who may do what, for every transport: API keys and the principals they authenticate as
(scopes, name prefixes; keys.py) and the per-process connection caps (limits.py). The
composition root (services.py), the HTTP app, the WebSocket wing and the surfaces' routes
share it; it depends on the engine's quotas and nothing above."""
