"""Feature-flag manifests (issue 8, spec flag-closure-events): namespace trees, lint, closures,
closure hashes, version/resync events, deterministic snapshots, tokens and subscriptions.
Pure logic: no HTTP, no storage (see docs/flags.md)."""
