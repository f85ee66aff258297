"""sql_query(source, query, *params) -> the rows of a read-only query, through the
Worker's `sql` IO backend (the function names a data source, never a DSN):

    blockx submit --calls 'sql_query:"local","SELECT count(*) AS n FROM squares"'"""

from blockx_executor import sdk


def main(source, query, *params):
    return sdk.io("sql", {"source": source, "query": query, "params": list(params)})["rows"]
