"""Model strings are bytes until proven text.

ONNX is a proto2 schema, so protobuf parses a `string` field holding invalid UTF-8 without a
complaint and hands it over as `bytes` (a byte flipped in a node name, a producer, a dim
param). Every reader of names (validation, module paths, shape inference, the renderers)
would then meet `bytes` where the schema promises `str`. So once, right after parsing, every
such field is replaced by its text with the invalid bytes escaped (`b"conv\\xff"` ->
`"conv\\\\xff"`): names stay distinct and displayable, valid text is untouched, and nothing
after the reader sees bytes.

Finding out costs one more parse, in C: the bytes are parsed again as a copy of ONNX's schema
whose strings protobuf verifies (an edition with `utf8_validation = VERIFY`), which fails on
the first invalid string (3-18 ms for the 19,832-node Llama-2-70B graph; walking every string
field in Python took 170-240 ms). Only a model that fails it is walked; the walk visits only
string and message fields, never the `bytes` payloads (raw_data of weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import onnx
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

_STRING, _MESSAGE = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE


def parse_model(data: bytes) -> onnx.ModelProto:
    """onnx.load_model_from_string, and every string field made text (module docstring).
    Raises what protobuf and onnx raise for a file that is not a model."""
    model = onnx.load_model_from_string(data)
    if not _all_text_valid(data):
        repair_text_fields(model)
    return model


def _all_text_valid(data: bytes) -> bool:
    verifying = _verifying_model_class()
    if verifying is None:
        return False  # no editions in this protobuf: walk every model
    try:
        verifying.FromString(data)
    except DecodeError:  # bad UTF-8, or anything else: the walk decides
        return False
    return True


@cache
def _verifying_model_class() -> type[Message] | None:
    """ModelProto of a copy of ONNX's schema in which protobuf verifies UTF-8 at parse."""
    schema = descriptor_pb2.FileDescriptorProto()
    onnx.ModelProto.DESCRIPTOR.file.CopyToProto(schema)
    schema.name = f"graphmem_verified_{schema.name}"
    schema.syntax = "editions"
    schema.edition = descriptor_pb2.EDITION_2023
    features = schema.options.features
    features.utf8_validation = descriptor_pb2.FeatureSet.VERIFY
    features.field_presence = descriptor_pb2.FeatureSet.EXPLICIT  # proto2's has-bits
    features.enum_type = descriptor_pb2.FeatureSet.CLOSED
    features.repeated_field_encoding = descriptor_pb2.FeatureSet.EXPANDED
    try:
        pool = descriptor_pool.DescriptorPool()
        pool.Add(schema)
        return message_factory.GetMessageClass(
            pool.FindMessageTypeByName(onnx.ModelProto.DESCRIPTOR.full_name))
    except (TypeError, ValueError, AttributeError):  # a protobuf without editions
        return None


def model_string(value: str | bytes) -> str:
    """A string field's value as text: invalid UTF-8 escaped as \\xNN."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return value


def repair_text_fields(message: Message) -> int:
    """Replace every string field of `message` and the messages inside it that holds invalid
    UTF-8 by its escaped text (model_string); returns how many fields were replaced."""
    repaired = 0
    stack = [message]
    while stack:
        current = stack.pop()
        fields = _fields(current.DESCRIPTOR)
        if fields.payload:  # never ListFields here: it would copy the weights' bytes
            present: Sequence[tuple[FieldDescriptor, Any]] = [
                (f, getattr(current, f.name)) for f in fields.walked
                if fields.kinds[f] & _REPEATED or current.HasField(f.name)]
        else:
            present = current.ListFields()
        kinds = fields.kinds
        for field, value in present:
            kind = kinds.get(field, 0)
            if kind == _ONE_MESSAGE:
                stack.append(value)
            elif kind == _MESSAGES:
                stack.extend(value)
            elif kind == _ONE_STRING and value.__class__ is bytes:
                setattr(current, field.name, model_string(value))
                repaired += 1
            elif kind == _STRINGS and any(v.__class__ is bytes for v in value):
                texts = [model_string(v) for v in value]
                del value[:]
                value.extend(texts)
                repaired += 1
    return repaired


# field kinds: bit 1 a message (else a string), bit 2 repeated
_REPEATED = 2
_ONE_STRING, _ONE_MESSAGE, _STRINGS, _MESSAGES = 4, 1, 4 | _REPEATED, 1 | _REPEATED


class _Fields:
    """A message type's string and message fields with their kinds, and whether it has a
    bytes payload."""

    def __init__(self, descriptor: Descriptor) -> None:
        self.walked = tuple(f for f in descriptor.fields if f.type in (_STRING, _MESSAGE))
        self.kinds = {f: (_ONE_MESSAGE if f.type == _MESSAGE else _ONE_STRING)
                      | (_REPEATED if _is_repeated(f) else 0) for f in self.walked}
        self.payload = any(f.type == FieldDescriptor.TYPE_BYTES for f in descriptor.fields)


def _is_repeated(field: FieldDescriptor) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf >= 5.28; `label` is deprecated
    if repeated is not None:
        return bool(repeated)
    # protobuf < 5.28 has only `label`, which the stubs (of the newest) no longer list
    return field.label == field.LABEL_REPEATED  # type: ignore[attr-defined]


@cache
def _fields(descriptor: Descriptor) -> _Fields:
    return _Fields(descriptor)
