"""--mode ray: simulator and collector actors on a Ray cluster, their placement and
fan-out, and weights through the object store (docs/architecture.md, Modes)."""
