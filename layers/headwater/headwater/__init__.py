"""Headwater: durable event streams, work queues and live feeds on serverless AWS."""

from __future__ import annotations

__version__ = "0.1.0"
