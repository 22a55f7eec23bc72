from stateset_agents.core.contracts import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IngestSource(_message.Message):
    __slots__ = ("path", "sha256", "local_path")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    LOCAL_PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    local_path: str
    def __init__(self, path: _Optional[str] = ..., sha256: _Optional[str] = ..., local_path: _Optional[str] = ...) -> None: ...

class IngestRequest(_message.Message):
    __slots__ = ("config", "source", "call_id")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.ComponentConfig
    source: IngestSource
    call_id: str
    def __init__(self, config: _Optional[_Union[_common_pb2.ComponentConfig, _Mapping]] = ..., source: _Optional[_Union[IngestSource, _Mapping]] = ..., call_id: _Optional[str] = ...) -> None: ...

class IngestReject(_message.Message):
    __slots__ = ("path", "line", "reason", "detail", "field")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    path: str
    line: int
    reason: str
    detail: str
    field: str
    def __init__(self, path: _Optional[str] = ..., line: _Optional[int] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ..., field: _Optional[str] = ...) -> None: ...

class IngestRecord(_message.Message):
    __slots__ = ("conversation", "reject", "event")
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    REJECT_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    conversation: _common_pb2.Conversation
    reject: IngestReject
    event: _common_pb2.Event
    def __init__(self, conversation: _Optional[_Union[_common_pb2.Conversation, _Mapping]] = ..., reject: _Optional[_Union[IngestReject, _Mapping]] = ..., event: _Optional[_Union[_common_pb2.Event, _Mapping]] = ...) -> None: ...
