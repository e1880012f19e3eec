"""Per-segment index companions for the Durable Streams ``/v1`` query routes (issue 24).

* ``index.plan``: ``IndexPlan.from_registry`` derives the families a stream wants from its
  schema registry (routing keys, exact, column, full-text, rollups) and a ``generation``
  fingerprint of exactly what affects the built bytes.
* One segment's companion object: ``index.docs`` (the builder's input, a segment's records
  as documents), ``index.columns`` (their field values), ``index.writer``
  (``build_companion``, pure and deterministic), ``index.format`` (the header, section table
  and checksums), ``index.companion`` (``Companion.from_bytes``: the decoded object), which
  narrows queries through ``index.query``, lists routing keys and answers pre-aggregated
  rollup windows through ``index.agg`` (which also builds them).
* A stream's companions: ``index.build`` (the incremental indexer, on the stores of
  ``index.ports``), ``index.runs`` (routing-key lexicon runs over many segments),
  ``index.local`` (the in-process indexer), ``index.reader`` (the request path).

The object format is described in ``docs/index-format.md``.
"""
