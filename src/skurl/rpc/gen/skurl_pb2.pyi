from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("name", "dtype", "shape", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class TensorBatch(_message.Message):
    __slots__ = ("tensors",)
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class SchemaField(_message.Message):
    __slots__ = ("name", "width")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    width: int
    def __init__(self, name: _Optional[str] = ..., width: _Optional[int] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ("env_id", "open")
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    open: bool
    def __init__(self, env_id: _Optional[str] = ..., open: _Optional[bool] = ...) -> None: ...

class InfoReply(_message.Message):
    __slots__ = ("num_skus", "schema", "shard_index", "shard_count", "rows", "info_json", "env_ids", "days")
    NUM_SKUS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SHARD_INDEX_FIELD_NUMBER: _ClassVar[int]
    SHARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    DAYS_FIELD_NUMBER: _ClassVar[int]
    num_skus: int
    schema: _containers.RepeatedCompositeFieldContainer[SchemaField]
    shard_index: int
    shard_count: int
    rows: TensorBatch
    info_json: str
    env_ids: _containers.RepeatedScalarFieldContainer[str]
    days: int
    def __init__(self, num_skus: _Optional[int] = ..., schema: _Optional[_Iterable[_Union[SchemaField, _Mapping]]] = ..., shard_index: _Optional[int] = ..., shard_count: _Optional[int] = ..., rows: _Optional[_Union[TensorBatch, _Mapping]] = ..., info_json: _Optional[str] = ..., env_ids: _Optional[_Iterable[str]] = ..., days: _Optional[int] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("env_id", "seed", "episode", "lean", "raw", "owed")
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    LEAN_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    OWED_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    seed: int
    episode: int
    lean: bool
    raw: bool
    owed: bool
    def __init__(self, env_id: _Optional[str] = ..., seed: _Optional[int] = ..., episode: _Optional[int] = ..., lean: _Optional[bool] = ..., raw: _Optional[bool] = ..., owed: _Optional[bool] = ...) -> None: ...

class ResetReply(_message.Message):
    __slots__ = ("obs", "day")
    OBS_FIELD_NUMBER: _ClassVar[int]
    DAY_FIELD_NUMBER: _ClassVar[int]
    obs: TensorBatch
    day: int
    def __init__(self, obs: _Optional[_Union[TensorBatch, _Mapping]] = ..., day: _Optional[int] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("env_id", "orders", "lean")
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    ORDERS_FIELD_NUMBER: _ClassVar[int]
    LEAN_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    orders: TensorBatch
    lean: bool
    def __init__(self, env_id: _Optional[str] = ..., orders: _Optional[_Union[TensorBatch, _Mapping]] = ..., lean: _Optional[bool] = ...) -> None: ...

class StepReply(_message.Message):
    __slots__ = ("obs", "result", "done", "day")
    OBS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    DAY_FIELD_NUMBER: _ClassVar[int]
    obs: TensorBatch
    result: TensorBatch
    done: bool
    day: int
    def __init__(self, obs: _Optional[_Union[TensorBatch, _Mapping]] = ..., result: _Optional[_Union[TensorBatch, _Mapping]] = ..., done: _Optional[bool] = ..., day: _Optional[int] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ("env_id",)
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    def __init__(self, env_id: _Optional[str] = ...) -> None: ...

class CloseReply(_message.Message):
    __slots__ = ("closed",)
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    closed: bool
    def __init__(self, closed: _Optional[bool] = ...) -> None: ...

class AttachRequest(_message.Message):
    __slots__ = ("env_id",)
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    def __init__(self, env_id: _Optional[str] = ...) -> None: ...

class AttachReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Weights(_message.Message):
    __slots__ = ("key", "version", "sha256", "payload")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    key: str
    version: int
    sha256: str
    payload: bytes
    def __init__(self, key: _Optional[str] = ..., version: _Optional[int] = ..., sha256: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class WeightsAck(_message.Message):
    __slots__ = ("key", "version", "accepted", "message")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    key: str
    version: int
    accepted: bool
    message: str
    def __init__(self, key: _Optional[str] = ..., version: _Optional[int] = ..., accepted: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class GetWeightsRequest(_message.Message):
    __slots__ = ("key", "min_version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    MIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    min_version: int
    def __init__(self, key: _Optional[str] = ..., min_version: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("key", "after_version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    AFTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    after_version: int
    def __init__(self, key: _Optional[str] = ..., after_version: _Optional[int] = ...) -> None: ...

class VersionRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class VersionReply(_message.Message):
    __slots__ = ("key", "version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    version: int
    def __init__(self, key: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class CollectRequest(_message.Message):
    __slots__ = ("iteration", "seed", "episode", "min_version", "timeout_s", "obs_sku_ids", "grid_center_blob", "grid_center_sha256")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    MIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    OBS_SKU_IDS_FIELD_NUMBER: _ClassVar[int]
    GRID_CENTER_BLOB_FIELD_NUMBER: _ClassVar[int]
    GRID_CENTER_SHA256_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    seed: int
    episode: int
    min_version: int
    timeout_s: float
    obs_sku_ids: _containers.RepeatedScalarFieldContainer[int]
    grid_center_blob: str
    grid_center_sha256: str
    def __init__(self, iteration: _Optional[int] = ..., seed: _Optional[int] = ..., episode: _Optional[int] = ..., min_version: _Optional[int] = ..., timeout_s: _Optional[float] = ..., obs_sku_ids: _Optional[_Iterable[int]] = ..., grid_center_blob: _Optional[str] = ..., grid_center_sha256: _Optional[str] = ...) -> None: ...

class CollectReply(_message.Message):
    __slots__ = ("collector_id", "iteration", "policy_version", "transitions", "seconds", "manifest_json")
    COLLECTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_JSON_FIELD_NUMBER: _ClassVar[int]
    collector_id: str
    iteration: int
    policy_version: int
    transitions: int
    seconds: float
    manifest_json: str
    def __init__(self, collector_id: _Optional[str] = ..., iteration: _Optional[int] = ..., policy_version: _Optional[int] = ..., transitions: _Optional[int] = ..., seconds: _Optional[float] = ..., manifest_json: _Optional[str] = ...) -> None: ...

class LabelRequest(_message.Message):
    __slots__ = ("job", "grid_center_blob", "grid_center_sha256")
    JOB_FIELD_NUMBER: _ClassVar[int]
    GRID_CENTER_BLOB_FIELD_NUMBER: _ClassVar[int]
    GRID_CENTER_SHA256_FIELD_NUMBER: _ClassVar[int]
    job: bytes
    grid_center_blob: str
    grid_center_sha256: str
    def __init__(self, job: _Optional[bytes] = ..., grid_center_blob: _Optional[str] = ..., grid_center_sha256: _Optional[str] = ...) -> None: ...

class LabelReply(_message.Message):
    __slots__ = ("collector_id", "manifest_json", "check", "seconds", "sku_days")
    COLLECTOR_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_JSON_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    SKU_DAYS_FIELD_NUMBER: _ClassVar[int]
    collector_id: str
    manifest_json: str
    check: bytes
    seconds: float
    sku_days: int
    def __init__(self, collector_id: _Optional[str] = ..., manifest_json: _Optional[str] = ..., check: _Optional[bytes] = ..., seconds: _Optional[float] = ..., sku_days: _Optional[int] = ...) -> None: ...

class GetBufferRequest(_message.Message):
    __slots__ = ("iteration", "names", "max_chunk_rows")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNK_ROWS_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    names: _containers.RepeatedScalarFieldContainer[str]
    max_chunk_rows: int
    def __init__(self, iteration: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ..., max_chunk_rows: _Optional[int] = ...) -> None: ...

class BufferChunk(_message.Message):
    __slots__ = ("iteration", "policy_version", "row_start", "rows", "total_rows", "tensors")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROW_START_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    policy_version: int
    row_start: int
    rows: int
    total_rows: int
    tensors: TensorBatch
    def __init__(self, iteration: _Optional[int] = ..., policy_version: _Optional[int] = ..., row_start: _Optional[int] = ..., rows: _Optional[int] = ..., total_rows: _Optional[int] = ..., tensors: _Optional[_Union[TensorBatch, _Mapping]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsReply(_message.Message):
    __slots__ = ("collector_id", "policy_version", "iterations", "transitions", "steps_per_second", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    COLLECTOR_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    collector_id: str
    policy_version: int
    iterations: int
    transitions: int
    steps_per_second: float
    values: _containers.ScalarMap[str, float]
    def __init__(self, collector_id: _Optional[str] = ..., policy_version: _Optional[int] = ..., iterations: _Optional[int] = ..., transitions: _Optional[int] = ..., steps_per_second: _Optional[float] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...
