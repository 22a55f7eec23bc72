from stateset_agents.core.contracts import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GradeItem(_message.Message):
    __slots__ = ("conversation", "turns", "all_assistant_turns", "conversation_json")
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    ALL_ASSISTANT_TURNS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_JSON_FIELD_NUMBER: _ClassVar[int]
    conversation: _common_pb2.Conversation
    turns: _containers.RepeatedScalarFieldContainer[int]
    all_assistant_turns: bool
    conversation_json: bytes
    def __init__(self, conversation: _Optional[_Union[_common_pb2.Conversation, _Mapping]] = ..., turns: _Optional[_Iterable[int]] = ..., all_assistant_turns: _Optional[bool] = ..., conversation_json: _Optional[bytes] = ...) -> None: ...

class GradeRequest(_message.Message):
    __slots__ = ("config", "items", "batch_id", "json_replies", "conversations_jsonl", "jsonl_replies", "accept_screened")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    JSON_REPLIES_FIELD_NUMBER: _ClassVar[int]
    CONVERSATIONS_JSONL_FIELD_NUMBER: _ClassVar[int]
    JSONL_REPLIES_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_SCREENED_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.ComponentConfig
    items: _containers.RepeatedCompositeFieldContainer[GradeItem]
    batch_id: int
    json_replies: bool
    conversations_jsonl: bytes
    jsonl_replies: bool
    accept_screened: bool
    def __init__(self, config: _Optional[_Union[_common_pb2.ComponentConfig, _Mapping]] = ..., items: _Optional[_Iterable[_Union[GradeItem, _Mapping]]] = ..., batch_id: _Optional[int] = ..., json_replies: _Optional[bool] = ..., conversations_jsonl: _Optional[bytes] = ..., jsonl_replies: _Optional[bool] = ..., accept_screened: _Optional[bool] = ...) -> None: ...

class RewardIdentity(_message.Message):
    __slots__ = ("name", "version", "config_sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    config_sha256: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., config_sha256: _Optional[str] = ...) -> None: ...

class Grade(_message.Message):
    __slots__ = ("conversation_id", "turn_index", "score", "applicable", "breakdown_json", "reason", "reward")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    APPLICABLE_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    turn_index: int
    score: float
    applicable: bool
    breakdown_json: bytes
    reason: str
    reward: RewardIdentity
    def __init__(self, conversation_id: _Optional[str] = ..., turn_index: _Optional[int] = ..., score: _Optional[float] = ..., applicable: _Optional[bool] = ..., breakdown_json: _Optional[bytes] = ..., reason: _Optional[str] = ..., reward: _Optional[_Union[RewardIdentity, _Mapping]] = ...) -> None: ...

class GradeReply(_message.Message):
    __slots__ = ("grades", "batch_id", "grades_json", "grades_jsonl", "screened", "screened_tail", "row_tails")
    GRADES_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    GRADES_JSON_FIELD_NUMBER: _ClassVar[int]
    GRADES_JSONL_FIELD_NUMBER: _ClassVar[int]
    SCREENED_FIELD_NUMBER: _ClassVar[int]
    SCREENED_TAIL_FIELD_NUMBER: _ClassVar[int]
    ROW_TAILS_FIELD_NUMBER: _ClassVar[int]
    grades: _containers.RepeatedCompositeFieldContainer[Grade]
    batch_id: int
    grades_json: bytes
    grades_jsonl: bytes
    screened: _containers.RepeatedScalarFieldContainer[int]
    screened_tail: _containers.RepeatedScalarFieldContainer[int]
    row_tails: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, grades: _Optional[_Iterable[_Union[Grade, _Mapping]]] = ..., batch_id: _Optional[int] = ..., grades_json: _Optional[bytes] = ..., grades_jsonl: _Optional[bytes] = ..., screened: _Optional[_Iterable[int]] = ..., screened_tail: _Optional[_Iterable[int]] = ..., row_tails: _Optional[_Iterable[bytes]] = ...) -> None: ...
