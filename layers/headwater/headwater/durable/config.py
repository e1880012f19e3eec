"""A stream's configuration: its schema registry (revisions as immutable objects, the
current one named by the head's state), its profile, and how entries are shaped by them on
append (validated, keyed, normalized) and promoted on read."""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from headwater import jsoncodec
from headwater.durable import profiles, schema
from headwater.durable.core import HOT_ATTEMPTS, RETRY, StreamsCore, backoff
from headwater.durable.errors import InvalidSchema, PromotionFailed, SchemaVersionConflict
from headwater.durable.offsets import boundary_seq, encode_offset
from headwater.durable.state import StreamState
from headwater.durable.values import Entry, check_derived_key
from headwater.durable.wire import is_json_type
from headwater.engine import StoredRecord
from headwater.engine.ports import REGISTRY_PREFIX, Head
from headwater.errors import InvalidRequest, StorageUnavailable
from headwater.names import object_key_component

REGISTRY_CACHE = 256  # schema registry revisions kept per process
CONF_CACHE = 100_000  # streams whose last-seen schema/profile a process remembers


class StreamConfigs:
    def __init__(self, core: StreamsCore) -> None:
        self._core = core
        self._engine = core.engine
        self._registries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._seen: dict[str, tuple[str, str]] = {}  # per stream, as this process last saw

    def seen_conf(self, name: str) -> tuple[str, str]:
        """(registry key, profile) of the stream as this process last saw it."""
        return self._seen.get(name, ("", ""))

    def note_conf(self, name: str, conf: tuple[str, str]) -> tuple[str, str]:
        if len(self._seen) >= CONF_CACHE and name not in self._seen:
            self._seen.clear()  # a bound, not an LRU: a miss costs one refused guard
        self._seen[name] = conf
        return conf

    async def shape(
        self, name: str, conf: tuple[str, str], entries: list[Entry], content_type: str | None
    ) -> list[Entry]:
        registry_key, profile_text = conf
        if not registry_key and not profile_text:
            return entries
        if content_type is None or not is_json_type(content_type):
            return entries  # the guard refuses the content type
        reg = await self.registry(name, registry_key)
        profile = json.loads(profile_text) if profile_text else None
        keyed_by_schema = bool(reg.get("routingKey"))
        out = []
        for e in entries:
            value = jsoncodec.loads(e.data)
            data = e.data
            try:
                if profile is not None:
                    value = profiles.normalize(profile, value)
                    data = jsoncodec.dumps(value)
                schema.validate(reg, value)
                key = e.key
                if keyed_by_schema:
                    if e.key is not None:
                        raise InvalidRequest(
                            "Stream-Key is not allowed: this stream's schema derives routing keys"
                        )
                    key = schema.routing_key(reg, value)
                elif profile is not None and key is None:
                    key = profiles.derived_routing_key(profile, value)
            except (schema.SchemaError, profiles.ProfileError) as exc:
                raise InvalidSchema(str(exc)) from None
            if key and key is not e.key:
                check_derived_key(key)
            out.append(Entry(data, key))
        return out

    async def registry(self, name: str, key: str) -> dict[str, Any]:
        """The stream's schema registry revision `key` ("" : none yet), cached (immutable)."""
        if not key:
            return schema.empty_registry(name)
        reg = self._registries.get(key)
        if reg is None:
            reg = json.loads(await self._engine.get_blob(key))
            self._registries[key] = reg
            while len(self._registries) > REGISTRY_CACHE:
                self._registries.popitem(last=False)
        else:
            self._registries.move_to_end(key)
        return reg

    async def update_schema(self, name: str, body: object) -> dict[str, Any]:
        """POST /_schema: the update applied to the registry as the stream is now, stored
        as a new revision, and made current by a conditional head write (so the boundary
        it records is the tail no append can have moved meanwhile)."""
        for attempt in range(HOT_ATTEMPTS):
            head, state = await self._core.lookup(name)
            if not is_json_type(state.content_type):
                raise InvalidSchema("schemas apply to application/json streams only")
            reg = await self.registry(name, state.registry_key)
            try:
                new = schema.apply_update(
                    reg,
                    body,
                    stream_is_empty=head.head_seq == 0,
                    end_offset=encode_offset(head.epoch, head.head_seq),
                )
            except schema.SchemaVersionConflict as exc:
                raise SchemaVersionConflict(str(exc)) from None
            except schema.SchemaError as exc:
                raise InvalidSchema(str(exc)) from None
            if await self._commit_conf(name, head, state, new):
                return new
            await backoff(attempt)
        raise StorageUnavailable("schema update kept conflicting; retry", headers=RETRY)

    async def update_profile(self, name: str, body: object) -> dict[str, Any]:
        """POST /_profile: store the profile; evlog and metrics also install their canonical
        schema registry (replacing the registry, reference behaviour), in the same
        conditional head write."""
        for attempt in range(HOT_ATTEMPTS):
            head, state = await self._core.lookup(name)
            try:
                profile = profiles.parse_profile_update(body, state.content_type)
                current = (state.profile or profiles.DEFAULT_PROFILE).get("kind", "generic")
                replace_registry = profiles.check_install(
                    profile, current_kind=str(current), stream_is_empty=head.head_seq == 0
                )
                install = profiles.install(profile, name) if replace_registry else None
                reg = (
                    schema.apply_update(
                        schema.empty_registry(name),
                        install,
                        stream_is_empty=True,
                        end_offset=encode_offset(head.epoch, head.head_seq),
                    )
                    if install is not None
                    else None
                )
            except (profiles.ProfileError, schema.SchemaError) as exc:
                raise InvalidRequest(str(exc)) from None
            if await self._commit_conf(name, head, replace(state, profile=profile), reg):
                return profiles.resource(profile)
            await backoff(attempt)
        raise StorageUnavailable("profile update kept conflicting; retry", headers=RETRY)

    async def _commit_conf(
        self, name: str, head: Head, state: StreamState, reg: dict[str, Any] | None
    ) -> bool:
        """Make `state` (with registry `reg` as a new revision, if given) the stream's, iff
        its head is still `head` (False: it moved; decide again)."""
        key = ""
        if reg is not None:
            key = (
                f"{REGISTRY_PREFIX}{object_key_component(head.topic)}/{head.epoch}/"
                f"{reg['currentVersion']}-{uuid.uuid4().hex}.json"
            )
            await self._engine.put_blob(key, json.dumps(reg, separators=(",", ":")).encode())
            state = replace(state, registry_key=key, schema_version=reg["currentVersion"])
        if await self._engine.put_ext(head, state.dump()) is None:
            if key:
                await self._engine.delete_blobs([key])  # lost a race: nothing refers to it
            return False
        if reg is not None:
            self._registries[key] = reg
        self.note_conf(name, state.conf)
        return True

    async def commit_conf_blob(
        self, name: str, head: Head, state: StreamState, key: str, body: bytes
    ) -> bool:
        """`_commit_conf` for an immutable object that `state` (its profile) refers to by `key`:
        the state-protocol touch templates (durable/touch/). The object is written first; a
        lost race deletes it again (nothing refers to it)."""
        await self._engine.put_blob(key, body)
        if await self._commit_conf(name, head, state, None):
            return True
        await self._engine.delete_blobs([key])
        return False

    def promoter(self, reg: dict[str, Any]) -> Callable[[StoredRecord], bytes] | None:
        """How a read brings stored entries to the current schema version (None: nothing
        to promote). Entries after a boundary are of its version; version 1 is the first."""
        current = int(reg.get("currentVersion", 0))
        if current < 2:
            return None

        def promote(rec: StoredRecord) -> bytes:
            version = schema.version_at(reg, rec.seq, key=boundary_seq)
            if version in (0, current):
                return rec.data_raw
            try:
                return jsoncodec.dumps(schema.promote(reg, jsoncodec.loads(rec.data_raw), version))
            except schema.LensApplyError as exc:
                raise PromotionFailed(
                    f"entry {rec.seq} (schema version {version}) cannot be read as version"
                    f" {current}: {exc}"
                ) from None

        return promote
