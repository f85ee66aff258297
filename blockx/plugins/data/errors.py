"""Errors of the data plane. Messages carry the database's own words (a bad query
fails with what PostgreSQL or DuckDB said) and never a DSN or a credential."""

from __future__ import annotations


class DataSourceError(Exception):
    """A data-plane operation failed; the message is meant for the task's submitter."""

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class UnknownDataSource(DataSourceError):
    """A payload or writer config named a source the Worker's config does not have."""
