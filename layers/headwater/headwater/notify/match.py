"""Does a stored notification pass a watch/replay filter?

Non-spatial first: every exact value (`*` matches anything) and every constraint must hold
for the stored canonical identifier. Then the spatial filter, only over the schema's polygon
field: `polygon` keeps notifications whose polygon intersects the request's (touching counts),
`point` keeps those whose polygon contains the point (a point on the edge is not contained).
The polygon field never takes part in exact matching.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from headwater.notify.handlers import LatLon
from headwater.notify.requests import PointFilter, PolygonFilter, StreamFilter
from headwater.notify.topic import WILDCARD

if TYPE_CHECKING:
    from headwater.notify.geometry import Point, Polygon

BBox = tuple[float, float, float, float]  # min_lon, min_lat, max_lon, max_lat


def stored_polygon(text: str) -> Polygon | None:
    """A stored polygon string as a prepared shapely polygon (None if it does not parse)."""
    from headwater.notify.geometry import stored_polygon as parse

    return parse(text)


def quick_bbox(text: str) -> BBox | None:
    """The bounding box of a stored polygon string by a plain float parse, without building
    the geometry: a cheap first test (a polygon outside the filter's box cannot intersect
    it). None when the text does not parse that simply (the full parser then decides)."""
    try:
        nums = [float(x) for x in text.strip().strip("()").split(",")]
    except ValueError:
        return None
    if len(nums) < 2 or len(nums) % 2 or not all(map(math.isfinite, nums)):
        return None
    lats, lons = nums[0::2], nums[1::2]
    return (min(lons), min(lats), max(lons), max(lats))


def bounding_box_text(coordinates: tuple[LatLon, ...]) -> str:
    """aviso's `spatial_bbox` header: `min_lat,min_lon,max_lat,max_lon` (Rust number text)."""
    from headwater.notify.numbers import rust_display_f64

    lats = [lat for lat, _ in coordinates]
    lons = [lon for _, lon in coordinates]
    return ",".join(rust_display_f64(v) for v in (min(lats), min(lons), max(lats), max(lons)))


class CompiledFilter:
    """A StreamFilter made ready for many records (geometry built and prepared once)."""

    __slots__ = (
        "_box",
        "_constraints",
        "_exact",
        "_point",
        "_polygon",
        "_polygon_field",
        "filter",
    )

    def __init__(self, stream_filter: StreamFilter) -> None:
        self.filter = stream_filter
        polygon_field = stream_filter.polygon_field
        self._polygon_field = polygon_field
        self._exact = tuple(
            (name, value)
            for name, value in stream_filter.values.items()
            if value != WILDCARD and name != polygon_field
        )
        self._constraints = tuple(stream_filter.constraints.items())
        self._polygon: Polygon | None = None
        self._point: Point | None = None
        spatial = stream_filter.spatial
        self._box: BBox | None = None
        if isinstance(spatial, PolygonFilter):
            from headwater.notify import geometry

            self._polygon = geometry.prepared(
                geometry.polygon_from_coordinates(spatial.coordinates)
            )
            self._box = self._polygon.bounds
        elif isinstance(spatial, PointFilter):
            from headwater.notify import geometry

            self._point = geometry.Point(spatial.lon, spatial.lat)
            self._box = (spatial.lon, spatial.lat, spatial.lon, spatial.lat)

    def matches_identifier(self, identifier: Mapping[str, str]) -> bool:
        """The non-spatial part: exact values and constraints."""
        for name, value in self._exact:
            if identifier.get(name) != value:
                return False
        for name, constraint in self._constraints:
            stored = identifier.get(name)
            if stored is None or stored in ("", WILDCARD) or not constraint.matches_text(stored):
                return False
        return True

    def matches_spatial(self, identifier: Mapping[str, str]) -> bool:
        if self._polygon is None and self._point is None:
            return True
        if self._polygon_field is None:
            return False
        text = identifier.get(self._polygon_field)
        if not text:
            return False
        box, mine = quick_bbox(text), self._box
        if (
            box is not None
            and mine is not None
            and (box[0] > mine[2] or box[2] < mine[0] or box[1] > mine[3] or box[3] < mine[1])
        ):
            return False  # the boxes do not even touch
        from headwater.notify import geometry  # loaded by __init__ already: a dict lookup

        candidate = geometry.stored_polygon(text)
        if candidate is None:
            return False
        try:
            if self._polygon is not None:
                return bool(self._polygon.intersects(candidate))
            return bool(candidate.contains(self._point))
        except geometry.GEOSException:
            return False

    def __call__(self, identifier: Mapping[str, str]) -> bool:
        return self.matches_identifier(identifier) and self.matches_spatial(identifier)


def matches(stream_filter: StreamFilter, identifier: Mapping[str, str]) -> bool:
    """One-off test; compile once with `CompiledFilter` to test many records."""
    return CompiledFilter(stream_filter)(identifier)
