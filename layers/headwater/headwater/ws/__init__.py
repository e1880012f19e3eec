"""The WebSocket wing: `/v0/ws` commands (commands.py) and frames (frames.py), served two ways:
by the uvicorn app's WebSocket endpoint (http/ws.py) and on AWS by API Gateway WebSocket
(WsFunction: connect and disconnect in gate.py), with delivery to API Gateway connections
from the forwarder (gateway.py). It depends on the engine, access/ and the /v0 request
language (v0/), never on FastAPI or the HTTP routes."""
