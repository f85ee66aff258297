"""The data plane: named data sources (DuckDB embedded, PostgreSQL through asyncpg)
that builders, writers and the `sql` IO backend reach by name.

urls (parsing, also used by the config rules), errors, values (rows <-> JSON),
idents (quoted SQL names), duck and pg (the two kinds of source), plane (the
Worker's sources and bundle root). Nothing heavy is imported here, so the config
rules can use `urls` without loading the database drivers."""
