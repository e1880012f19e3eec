"""Per-segment index companions for the Durable Streams ``/v1`` query routes (issue 24).

* ``index.plan``: ``IndexPlan.from_registry`` derives the families a stream wants from its
  schema registry (routing keys, exact, column, full-text, rollups) and a ``generation``
  fingerprint of exactly what affects the built bytes.
* ``index.companion``: ``build_companion`` (pure, deterministic) writes one companion object
  per sealed segment; ``Companion.from_bytes`` reads it and narrows queries, lists routing
  keys and answers pre-aggregated rollup windows.

The object format is described in ``docs/index-format.md``.
"""
