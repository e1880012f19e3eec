"""HTTP surfaces over the engine. create_app() in app.py builds the one ASGI app."""
