"""gRPC services and clients of the decoupled deployment (docs/architecture.md: Wire formats and services, Modes).

- skurl.proto, gen/: the wire contract (package skurl.v1) and its generated code
  (scripts/gen_protos.sh regenerates it).
- codec.py: named numpy arrays <-> Tensor/TensorBatch, strictly validated;
  wire_fast.py: the same bytes written/read without copies for the big env replies.
- env_server.py / env_client.py: EnvService, one catalog shard per server, and RemoteEnv,
  the Env protocol over it; multi_shard.py: MultiShardEnv, shards as one Env.
- weights_server.py / weights_client.py: WeightSyncService and the WeightPublisher /
  WeightSubscriber over it; collector_server.py / collector_client.py: CollectorService.
- options.py: message limits and keepalive from RpcConfig for both ends;
  errors.py: status codes <-> skurl errors; bench.py: in-process vs loopback throughput.

Import the submodules you need; nothing is imported here, so the codec does not pull in
torch (the weight modules do).
"""
