from stateset_agents.core.contracts import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class GetMetadataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Metadata(_message.Message):
    __slots__ = ("kind", "name", "version", "capabilities", "contract_versions", "package", "kernel_version", "features")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    version: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    contract_versions: _containers.RepeatedScalarFieldContainer[int]
    package: str
    kernel_version: str
    features: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ..., contract_versions: _Optional[_Iterable[int]] = ..., package: _Optional[str] = ..., kernel_version: _Optional[str] = ..., features: _Optional[_Iterable[str]] = ...) -> None: ...

class ShutdownRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShutdownReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
