"""The event log's writes against the real PostgreSQL."""

from __future__ import annotations

import psycopg

from generation import eventlog
from generation.notice import encode_notice, make_notice


def _entry(n: int) -> eventlog.Entry:
    notice = make_notice({"type": "note", "n": n}, [{"id": 1, "flags": []}], 1)
    return notice, encode_notice(notice)


def test_a_writer_has_a_transaction_id_before_it_has_a_position(database_url: str):
    # A server that finds a position missing waits for the transactions
    # running when it looked; one that took the position without an id yet
    # would not be among them, and its event would be taken for rolled back.
    with psycopg.connect(database_url) as conn:
        # The sequence writes ahead 32 values at a time, and that write takes
        # an id; taken now, the next few values come without one.
        conn.execute("SELECT nextval('event_log_position')")
        conn.commit()
        assert conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone() == (None,)
        conn.execute(eventlog._RESERVE, (2,)).fetchall()
        row = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
        assert row is not None
        assert row[0] is not None
        conn.rollback()


def test_writes_return_positions_in_order_and_a_retry_finds_its_row(database_url: str):
    with psycopg.connect(database_url) as conn:
        [one] = eventlog.write(conn, [_entry(0)])
        many = eventlog.write(conn, [_entry(1), _entry(2), _entry(3)])
        first = eventlog.write_once(conn, _entry(4), "retry-test-1")
        again = eventlog.write_once(conn, _entry(4), "retry-test-1")
        conn.commit()
        assert one < many[0] < many[1] < many[2] < first == again
        rows = conn.execute(
            "SELECT position, event_type, realm_id FROM event_log WHERE position = ANY(%s)"
            " ORDER BY position",
            ([one, *many, first],),
        ).fetchall()
    assert rows == [(p, "note", 1) for p in [one, *many, first]]


def test_every_write_records_whom_a_notice_names_and_whether_it_is_public(database_url: str):
    def notice(event: dict, users: list) -> eventlog.Entry:
        made = make_notice(event, users, 1)
        return made, encode_notice(made)

    public = {"type": "message", "invite_only": False, "message": {"id": 1, "type": "stream"}}
    private = {**public, "invite_only": True}
    direct = {"type": "message", "message": {"id": 2, "type": "private"}}
    entries = [
        notice(public, [{"id": 7, "flags": []}, 9]),
        notice(private, [{"id": 7, "flags": ["read"]}]),
        notice(direct, [3, 4]),
        notice({"type": "note"}, [11]),
    ]
    with psycopg.connect(database_url) as conn:
        [one] = eventlog.write(conn, entries[:1])
        many = eventlog.write(conn, entries[1:3])
        once = eventlog.write_once(conn, entries[3], "recipients-test-1")
        conn.commit()
        rows = conn.execute(
            "SELECT recipients, public_message FROM event_log WHERE position = ANY(%s)"
            " ORDER BY position",
            ([one, *many, once],),
        ).fetchall()
    assert rows == [([7, 9], True), ([7], False), ([3, 4], False), ([11], False)]
