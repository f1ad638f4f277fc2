"""Serving: inventory snapshots, ONNX export, recommend, A/B tests."""
