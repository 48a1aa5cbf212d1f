"""Exceptions of the connector API.

``ConnectException`` is the root. A connector or task raises ``RetriableException``
for a failure that may go away by itself (a broker or database briefly unreachable);
the framework retries those, and fails the task on anything else.
"""

from __future__ import annotations


class ConnectException(Exception):
    """Base class of every error the framework or a connector raises on purpose."""


class RetriableException(ConnectException):
    """A failure that may succeed when the same call is made again later."""


class DataException(ConnectException):
    """A value does not match its schema, or data cannot be converted."""


class ConfigException(ConnectException):
    """A configuration is invalid. ``problems`` lists every problem at once.

    Each problem is a :class:`~airflow_copycat.connect.config.ConfigProblem`
    naming the key, the value that was given (secrets hidden) and why it is wrong.
    """

    def __init__(self, problems, *, context: str | None = None):
        self.problems = list(problems)
        self.context = context
        head = f"Invalid configuration for {context}" if context else "Invalid configuration"
        lines = [f"{head}: {len(self.problems)} problem(s)"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))
