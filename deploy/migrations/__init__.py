"""The SQL migrations, shipped in the wheel as the package `server.migrations`
(pyproject.toml maps this directory there) and read by server/migrate.py
through importlib.resources, never by a path into a checkout."""
