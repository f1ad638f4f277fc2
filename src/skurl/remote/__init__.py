"""Decoupled mode's parts: collector processes and sim servers over gRPC, their
supervisor, shard reading for the learner ranks."""
