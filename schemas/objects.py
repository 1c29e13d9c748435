"""What inventory tells Kairos of its objects: `object-created` and a host's attributes."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from schemas.base import Contract, HostStatus, Message, Timestamp

LABELS_MAX = 64
LABEL_KEY_MAX_CHARS = 128
LABEL_VALUE_MAX_CHARS = 1024
"""Labels are copied into each host's state and every state change: bounded so that no
derived record can approach Kafka's 1 MiB message limit (64 x (128 + 1024) B < 80 KiB)."""


class Operation(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"


LabelKey = Annotated[str, Field(min_length=1, max_length=LABEL_KEY_MAX_CHARS)]
LabelValue = Annotated[str, Field(max_length=LABEL_VALUE_MAX_CHARS)]
HostLabels = Annotated[
    dict[LabelKey, LabelValue],
    Field(
        max_length=LABELS_MAX,
        description=(
            f"At most {LABELS_MAX} labels, keys of 1 to {LABEL_KEY_MAX_CHARS} and values up to"
            f" {LABEL_VALUE_MAX_CHARS} characters."
        ),
    ),
]
"""A host's labels wherever they enter Kairos: bounded, since host state copies them."""


class ObjectAttributes(Contract):
    """What inventory knows of an object; all optional but activity and status."""

    hostname: str | None = Field(default=None, max_length=255)
    ip: str | None = Field(default=None, max_length=64)
    os: str | None = Field(default=None, max_length=255)
    organization: str | None = Field(default=None, max_length=255)
    labels: HostLabels = Field(default_factory=dict)
    is_active: bool = True
    status: HostStatus = HostStatus.UP


class ObjectEvent(Message):
    """On `object-created`, key = object_id. Type "host" schedules a host."""

    object_type: str = Field(min_length=1, max_length=64)
    object_id: str = Field(min_length=1, max_length=255)
    operation: Operation = Operation.CREATED
    occurred_at: Timestamp
    attributes: ObjectAttributes = Field(default_factory=ObjectAttributes)
