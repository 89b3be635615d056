"""State fetchers: the queries of each section (the only psycopg users here).

Each fetcher takes an autocommit connection, so every statement sees its own
snapshot: the fetch is deliberately not atomic (register replays the queue's
events over it). A fetcher makes a fixed number of queries, whatever the size
of the realm.
"""
