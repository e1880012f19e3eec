"""Auto-priority (spec §0.10): a manual priority wins; otherwise recency of the last read
decides. Our rule: 1000 for a topic read just now, minus one point per second since its last
read, floor 0; a topic never read (or with auto_priority off) is 0."""

from __future__ import annotations

from headwater.engine.config import TopicConfig


def effective_priority(config: TopicConfig, last_read_ts: int | None, now_ms: int) -> int:
    manual = config.priority
    if manual is not None:
        return int(manual)
    if not config.auto_priority or last_read_ts is None:
        return 0
    return max(0, 1000 - max(0, now_ms - last_read_ts) // 1000)
