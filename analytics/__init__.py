"""Spark jobs over eventq's delivery logs (docs/architecture.md, "Analytics").

`python -m analytics run --logs DIR --out DIR` reads the Parquet delivery log
that every shard writes under `<logs>/deliveries/date=YYYY-MM-DD/hour=HH/`,
aggregates it per hour and overall, writes Parquet tables, an HTML report with
PNG charts and a console summary. Extract (`extract`), pure transforms
(`transforms`, `histogram`), load (`load`, `report`), orchestrated by `job`.

This package imports the standard library, pyspark and matplotlib only: the
log format crosses the server/analytics boundary through a contract test, not
an import.
"""
