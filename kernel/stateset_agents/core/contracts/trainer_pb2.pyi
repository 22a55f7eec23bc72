from stateset_agents.core.contracts import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TrainRequest(_message.Message):
    __slots__ = ("config", "request_json", "call_id")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_JSON_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.ComponentConfig
    request_json: bytes
    call_id: str
    def __init__(self, config: _Optional[_Union[_common_pb2.ComponentConfig, _Mapping]] = ..., request_json: _Optional[bytes] = ..., call_id: _Optional[str] = ...) -> None: ...
