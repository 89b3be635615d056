"""Appliers and post-processing of the users area's sections."""

from __future__ import annotations
