"""Retrying operations that fail for a while: ``errors.retry.timeout`` and ``errors.retry.delay.max.ms``.

Kafka Connect retries a failed conversion or transform with exponential
back-off for up to ``errors.retry.timeout`` ms (0: no retry, -1: forever),
waiting at most ``errors.retry.delay.max.ms`` between attempts, but only for
*retriable* errors. The same budget covers what a bounded run needs from the
outside world before it can copy: reaching Kafka (the offset topic, topic
metadata, the consumer group) and a source task's ``poll()`` raising
:class:`~airflow_copycat.connect.errors.RetriableException` (a database
connection lost, a file briefly gone). When the budget is spent the task fails,
saying what it was doing and where, and Airflow's retries take over.

Retriable: :class:`RetriableException`, a ``KafkaException`` whose error says
so (or is a transport/timeout error), and ``ConnectionError``/``TimeoutError``.
Anything else fails at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping, TypeVar

from confluent_kafka import KafkaError, KafkaException

from ..connect.errors import ConnectException, RetriableException

log = logging.getLogger("airflow_copycat.retry")

T = TypeVar("T")

_TRANSIENT_KAFKA = {
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT,
    KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.UNKNOWN_TOPIC_OR_PART,
}


class RetriesExhausted(ConnectException):
    """A retriable failure outlasted ``errors.retry.timeout``: not to be retried again."""


def is_retriable(error: BaseException) -> bool:
    """Whether ``error`` may go away if the same call is made again later.

    Never for :class:`RetriesExhausted` or a record the error handler refused (``RecordFailed``,
    whatever caused it), nor for fatal Kafka errors (fenced, authentication)."""
    if isinstance(error, RetriesExhausted) or type(error).__name__ == "RecordFailed":
        return False
    if isinstance(error, RetriableException | ConnectionError | TimeoutError):
        return True
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        err = error.args[0]
        if err.fatal() or err.txn_requires_abort():
            return False
        return bool(err.retriable()) or err.code() in _TRANSIENT_KAFKA
    cause = error.__cause__
    return cause is not None and cause is not error and isinstance(error, ConnectException) and is_retriable(cause)


class RetryPolicy:
    """Exponential back-off within a time budget.

    ``timeout_ms``: total time to keep retrying (0: never retry, negative: forever).
    ``delay_max_ms``: the longest wait between attempts (first wait 300 ms, doubling).
    ``sleep`` and ``clock`` are :func:`time.sleep` and :func:`time.monotonic` except in tests
    that cannot wait.
    """

    def __init__(self, timeout_ms: int, delay_max_ms: int = 60000, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.timeout_ms = int(timeout_ms)
        self.delay_max = max(int(delay_max_ms), 1) / 1000.0
        self.sleep, self.clock = sleep, clock
        self.retries = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "RetryPolicy":
        """The policy of a connector config's ``errors.retry.*`` keys (their declared defaults: 0 and 60000)."""
        from .settings import FrameworkSettings

        s = FrameworkSettings.of(config)
        return cls(s.retry_timeout_ms, s.retry_delay_max_ms)

    def call(self, fn: Callable[[], T], *, what: str, where: str = "", failed: BaseException | None = None) -> T:
        """``fn()``, retried while it raises a retriable error and the budget lasts.

        ``what`` says what the call does (``"reading offsets from copycat-offsets"``),
        ``where`` which record or partition it concerns; both go into the error that
        ends the retries, which chains the last failure. ``failed``: the caller already
        made the first attempt, which raised this (the hot path tries without the policy).
        """
        started = self.clock()
        delay = 0.3
        attempt = 0
        while True:
            try:
                if failed is not None:
                    e, failed = failed, None
                    raise e
                return fn()
            except Exception as e:
                if not is_retriable(e):
                    raise
                attempt += 1
                waited = self.clock() - started
                budget = self.timeout_ms / 1000.0
                if self.timeout_ms == 0 or (self.timeout_ms > 0 and waited + delay > budget):
                    at = f" ({where})" if where else ""
                    tried = f"after {attempt} attempt(s) over {waited:.1f}s" if attempt > 1 else "on the first attempt"
                    raise RetriesExhausted(
                        f"{what}{at} failed {tried}: {type(e).__name__}: {e}. It is retriable: raise "
                        f"errors.retry.timeout (now {self.timeout_ms} ms) to keep trying longer."
                    ) from e
                self.retries += 1
                log.warning("%s%s failed (%s: %s); retry %d in %.1fs", what, f" ({where})" if where else "",
                            type(e).__name__, e, attempt, delay)
                self.sleep(delay)
                delay = min(delay * 2, self.delay_max)
