"""Pure building blocks (offsets, filter predicates) for the /v1 Durable Streams HTTP surface."""
