"""gRPC services and clients of the decoupled deployment (docs/architecture.md: Wire formats and services, Modes).

More: docs/internals.md (rpc/__init__.py)."""
