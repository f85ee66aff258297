"""sql_rows(source, query) -> the rows of a read-only query through the sql IO backend."""
from blockx_executor import sdk


def main(source, query):
    return sdk.io("sql", {"source": source, "query": query})["rows"]
