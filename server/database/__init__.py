"""The server's PostgreSQL: the async pool and its queries, migrations, and the
background updates with their runner."""
