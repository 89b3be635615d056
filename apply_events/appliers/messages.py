"""Appliers and post-processing of the messages area's sections."""

from __future__ import annotations
