from stateset_agents.core.contracts import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProviderRequest(_message.Message):
    __slots__ = ("config", "json")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.ComponentConfig
    json: bytes
    def __init__(self, config: _Optional[_Union[_common_pb2.ComponentConfig, _Mapping]] = ..., json: _Optional[bytes] = ...) -> None: ...

class ProviderReply(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    def __init__(self, json: _Optional[bytes] = ...) -> None: ...
