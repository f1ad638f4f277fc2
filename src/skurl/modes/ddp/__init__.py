"""The DDP learner: torchrun ranks over decoupled collectors, each rank assembling the
shards of the store (docs/architecture.md, Modes)."""
