"""Appliers and post-processing of the streams area's sections."""

from __future__ import annotations
