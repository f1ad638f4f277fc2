"""gRPC services and clients of the decoupled deployment (docs/architecture.md: Wire formats and services, Modes).

The transport only: skurl.proto and its generated code, the tensor codec, the env, weight
and collector services and their clients. Nothing is imported here, so the codec does not
pull in torch (the weight modules do); import the submodules you need.

More: docs/internals.md (rpc/__init__.py)."""
