"""The log engine: topics, append with group commit, diff reads, record deletes.

The engine's modules import asyncio inside the coroutines and loop callbacks that use it,
not at their top: SealerFunction runs the engine's synchronous upkeep and never an event
loop, and asyncio is ~5 ms of its cold start (docs/operations.md "Cold start"; checked by
tests/infra/test_handler_imports.py)."""
