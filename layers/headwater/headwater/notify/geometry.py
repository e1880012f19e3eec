"""The geometry of spatial filters (shapely, hence numpy: ~60 MB and ~0.1-0.2 s to import).
Imported by notify.match only when a filter is spatial, so a process that never serves one
never loads it."""

from __future__ import annotations

from functools import lru_cache

import shapely
from shapely.errors import GEOSException
from shapely.geometry import Point, Polygon

from headwater.notify.errors import FieldError
from headwater.notify.handlers import LatLon, check_polygon_shape, parse_polygon

__all__ = [
    "GEOSException",
    "Point",
    "Polygon",
    "polygon_from_coordinates",
    "prepared",
    "stored_polygon",
]


def polygon_from_coordinates(coordinates: tuple[LatLon, ...]) -> Polygon:
    """shapely polygon in (x=lon, y=lat) from aviso's (lat, lon) pairs."""
    return Polygon([(lon, lat) for lat, lon in coordinates])


def prepared(polygon: Polygon) -> Polygon:
    shapely.prepare(polygon)
    return polygon


@lru_cache(maxsize=8192)
def stored_polygon(text: str) -> Polygon | None:
    """A stored polygon string as a prepared shapely polygon (None if it does not parse)."""
    try:
        coordinates = parse_polygon(text)
        check_polygon_shape(coordinates)
    except FieldError:
        return None
    return prepared(polygon_from_coordinates(coordinates))
