"""Widgets: the polls and todo lists a message declares with a leading slash
command, and the shape of what readers add to them (Zulip's
zerver/lib/widget.py and the widget checks of zerver/lib/validator.py).

A message whose content starts with `/poll` or `/todo` gets, as it is sent,
the first entry of its widget log (a `widget` submessage) whose content is
`{"widget_type": ..., "extra_data": ...}`; readers then add entries with
`POST submessage` (submessages.py), whose content this module checks against
the widget's protocol. The server never folds the log: clients do.

Pure: no database.
"""

from __future__ import annotations

import json
import re
from typing import Any

from generation.actions.base import ActionError

WIDGET_TYPES = ("poll", "todo")
# The only submessage type clients send (Zulip's widgets' `msg_type`).
WIDGET_MSG_TYPE = "widget"
# Zulip's MAX_IDX: the highest option or task index a client may use.
MAX_IDX = 1000

# One leading list marker ("- ", "* ") of an option or task line, as Zulip
# strips it (the pattern may match nothing, which removes nothing).
_LIST_MARKER = re.compile(r"(\s*[-*]?\s*)")


def _first_line_and_items(text: str) -> tuple[str, list[str]]:
    """The text after the command: its first line (the question, the title)
    and the non-empty later lines without a list marker."""
    lines = text.splitlines()
    first = ""
    if lines and lines[0]:
        first = lines.pop(0).strip()
    items = [_LIST_MARKER.sub("", line.strip(), count=1) for line in lines]
    return first, [item for item in items if item]


def _extra_data(widget_type: str, text: str) -> dict[str, Any]:
    first, items = _first_line_and_items(text)
    if widget_type == "poll":
        return {"question": first, "options": items}
    tasks = []
    for item in items:
        # A task and its description are separated by the first ": ".
        task, _, desc = item.partition(": ")
        tasks.append({"task": task.strip(), "desc": desc.strip()})
    return {"task_list_title": first, "tasks": tasks}


def widget_content(content: str) -> str | None:
    """The content of the widget a message's (stored) content declares, as
    Zulip stores it (Python's `json.dumps`, so byte for byte), or None when
    it starts with no widget command."""
    command = re.split(r"\s+", content, maxsplit=1)[0]
    widget_type = command.removeprefix("/")
    if not command.startswith("/") or widget_type not in WIDGET_TYPES:
        return None
    extra_data = _extra_data(widget_type, content[len(command) :])
    return json.dumps({"widget_type": widget_type, "extra_data": extra_data})


def widget_type_of(content: str) -> str | None:
    """The `widget_type` a widget submessage's content declares, if any."""
    try:
        data = json.loads(content)
    except ValueError:
        return None
    kind = data.get("widget_type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


# -- what readers add ----------------------------------------------------------

_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean"}


def _check_keys(name: str, data: dict[str, Any], keys: dict[str, type]) -> None:
    """`data` has exactly `keys`, each of its type (Zulip's check_dict_only)."""
    for key, kind in keys.items():
        where = f'{name}["{key}"]'
        if key not in data:
            raise ActionError(f"{where} is missing")
        value = data[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ActionError(f"{where} is not {_TYPE_NAMES[kind]}")
    unexpected = sorted(set(data) - set(keys))
    if unexpected:
        raise ActionError(f"Unexpected arguments: {', '.join(unexpected)}")


def _check_idx(where: str, value: int) -> None:
    if value < 0:
        raise ActionError(f"{where} is too small")
    if value > MAX_IDX:
        raise ActionError(f"{where} is too large")


def _typed(name: str, data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ActionError(f"{name} is not a dict")
    if "type" not in data:
        raise ActionError(f'{name}["type"] is missing')
    if not isinstance(data["type"], str):
        raise ActionError(f'{name}["type"] is not a string')
    return data


def check_poll_data(data: object, *, is_author: bool) -> None:
    """A poll's entry: a vote (1 or -1 for an option's key), a new option,
    or (its author only) a new question."""
    poll = _typed("poll data", data)
    kind = poll["type"]
    if kind == "vote":
        _check_keys("poll data", poll, {"type": str, "key": str, "vote": int})
        if poll["vote"] not in (1, -1):
            raise ActionError('Invalid poll data["vote"]')
    elif kind == "question":
        if not is_author:
            raise ActionError("You can't edit a question unless you are the author.")
        _check_keys("poll data", poll, {"type": str, "question": str})
    elif kind == "new_option":
        _check_keys("poll data", poll, {"type": str, "option": str, "idx": int})
        _check_idx('poll data["idx"]', poll["idx"])
    else:
        raise ActionError(f"Unknown type for poll data: {kind}")


def check_todo_data(data: object, *, is_author: bool) -> None:
    """A todo list's entry: a new task, a struck (or unstruck) task, or (its
    author only) a new title."""
    todo = _typed("todo data", data)
    kind = todo["type"]
    if kind == "new_task":
        keys = {"type": str, "key": int, "task": str, "desc": str, "completed": bool}
        _check_keys("todo data", todo, keys)
        _check_idx('todo data["key"]', todo["key"])
    elif kind == "strike":
        _check_keys("todo data", todo, {"type": str, "key": str})
    elif kind == "new_task_list_title":
        if not is_author:
            raise ActionError("You can't edit the task list title unless you are the author.")
        _check_keys("todo data", todo, {"type": str, "title": str})
    else:
        raise ActionError(f"Unknown type for todo data: {kind}")


def check_widget_data(widget_type: str | None, data: object, *, is_author: bool) -> None:
    """What a reader adds to a message's widget, checked against the widget's
    protocol; a message without a known widget takes any JSON (as Zulip's)."""
    if widget_type == "poll":
        check_poll_data(data, is_author=is_author)
    elif widget_type == "todo":
        check_todo_data(data, is_author=is_author)
