from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolCall(_message.Message):
    __slots__ = ("id", "type", "name", "arguments", "arguments_json", "extra_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    name: str
    arguments: str
    arguments_json: bytes
    extra_json: bytes
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ..., arguments_json: _Optional[bytes] = ..., extra_json: _Optional[bytes] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content_text", "content_parts_json", "content_null", "tool_calls", "has_tool_calls", "tool_call_id", "name", "extra_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_PARTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTENT_NULL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    HAS_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    role: str
    content_text: str
    content_parts_json: bytes
    content_null: bool
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    has_tool_calls: bool
    tool_call_id: str
    name: str
    extra_json: bytes
    def __init__(self, role: _Optional[str] = ..., content_text: _Optional[str] = ..., content_parts_json: _Optional[bytes] = ..., content_null: _Optional[bool] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., has_tool_calls: _Optional[bool] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ..., extra_json: _Optional[bytes] = ...) -> None: ...

class SourceRef(_message.Message):
    __slots__ = ("path", "sha256", "line", "extra_json")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    line: int
    extra_json: bytes
    def __init__(self, path: _Optional[str] = ..., sha256: _Optional[str] = ..., line: _Optional[int] = ..., extra_json: _Optional[bytes] = ...) -> None: ...

class Conversation(_message.Message):
    __slots__ = ("id", "source", "messages", "tools_json", "metadata_json", "has_source", "extra_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    HAS_SOURCE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    source: SourceRef
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools_json: bytes
    metadata_json: bytes
    has_source: bool
    extra_json: bytes
    def __init__(self, id: _Optional[str] = ..., source: _Optional[_Union[SourceRef, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools_json: _Optional[bytes] = ..., metadata_json: _Optional[bytes] = ..., has_source: _Optional[bool] = ..., extra_json: _Optional[bytes] = ...) -> None: ...

class ComponentConfig(_message.Message):
    __slots__ = ("json", "sha256")
    JSON_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    sha256: str
    def __init__(self, json: _Optional[bytes] = ..., sha256: _Optional[str] = ...) -> None: ...

class ArtifactRef(_message.Message):
    __slots__ = ("uri", "sha256", "size")
    URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    sha256: str
    size: int
    def __init__(self, uri: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("type", "json")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    type: str
    json: bytes
    def __init__(self, type: _Optional[str] = ..., json: _Optional[bytes] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("call_id",)
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    def __init__(self, call_id: _Optional[str] = ...) -> None: ...

class CancelReply(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...
