"""The /v0 request language, independent of the transport: request bodies and query strings
validated into engine values (parse.py), and what an append and a watch request do
(requests.py). The HTTP routes (http/) and the WebSocket commands (ws/) share it, so the
WebSocket function imports neither FastAPI nor the HTTP routes."""
