"""Weights as bytes and as a growing version: the safetensors codec and the versioned slot,
a leaf under both the sync backends (skurl.sync) and the gRPC transport (skurl.rpc)."""
