"""--mode decoupled: sim servers, collector processes and the learner over gRPC; the
collector service and its client, the supervisor, shard envs and stream, lag watch, the
remote grid (docs/architecture.md, Modes)."""
