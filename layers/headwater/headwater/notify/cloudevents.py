"""The CloudEvents 1.0 body aviso sends for one notification (watch and replay frames).

Keys come out in aviso's wire order (serde_json sorts them); `data.payload` is the stored
payload unchanged, JSON null when the notify request had none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from headwater.notify.numbers import wire_json

TYPE_PREFIX = "int.ecmwf.aviso"


@dataclass(frozen=True, slots=True)
class CloudEventSettings:
    #: aviso's `application.base_url`: the event `source` and the prefix of `dataschema`
    base_url: str = "http://localhost"


def cloudevent_time(moment: datetime) -> str:
    """chrono's RFC 3339 with `Z` and only as many fraction digits as needed (0, 3 or 6)."""
    utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    micros = utc.microsecond
    if micros == 0:
        return text + "Z"
    if micros % 1000 == 0:
        return f"{text}.{micros // 1000:03d}Z"
    return f"{text}.{micros:06d}Z"


def cloudevent(
    event_type: str,
    seq: int,
    identifier: Mapping[str, str],
    payload: Any,
    time: datetime,
    settings: CloudEventSettings,
) -> dict[str, Any]:
    base = settings.base_url
    return {
        "data": {"identifier": dict(identifier), "payload": payload},
        "datacontenttype": "application/json",
        "dataschema": f"{base}/schema/{event_type}",
        "id": f"{event_type}@{seq}",
        "source": base,
        "specversion": "1.0",
        "time": cloudevent_time(time),
        "type": f"{TYPE_PREFIX}.{event_type}",
    }


def cloudevent_json(
    event_type: str,
    seq: int,
    identifier: Mapping[str, str],
    payload_json: bytes,
    time: datetime,
    settings: CloudEventSettings,
) -> bytes:
    """The same event as aviso's JSON bytes (`numbers.wire_json` of `cloudevent`), with the
    stored payload JSON spliced in unchanged: a replay never decodes payloads. The keys in
    sorted order are data (identifier, payload), datacontenttype, dataschema, id, source,
    specversion, time, type; the pieces that depend only on the event type are built once."""
    schema_part, source_part, type_part = _fixed_parts(event_type, settings.base_url)
    return b"".join(
        (
            b'{"data":{"identifier":',
            wire_json(identifier).encode(),
            b',"payload":',
            payload_json,
            schema_part,
            wire_json(f"{event_type}@{seq}").encode(),
            source_part,
            wire_json(cloudevent_time(time)).encode(),
            type_part,
        )
    )


@lru_cache(maxsize=1024)
def _fixed_parts(event_type: str, base: str) -> tuple[bytes, bytes, bytes]:
    schema = wire_json(f"{base}/schema/{event_type}")
    return (
        f'}},"datacontenttype":"application/json","dataschema":{schema},"id":'.encode(),
        f',"source":{wire_json(base)},"specversion":"1.0","time":'.encode(),
        f',"type":{wire_json(f"{TYPE_PREFIX}.{event_type}")}}}'.encode(),
    )
