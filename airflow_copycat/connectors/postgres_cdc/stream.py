"""One bounded read of the slot, as changes with their Debezium offsets and the position the slot may be confirmed to.

:class:`StreamRead` walks the decoded messages of one read (:func:`.slot.read_changes` up to the
run's bound) and hands out the captured tables' changes in WAL order, each with the offset a
record of it carries, in Debezium's PostgreSQL shape::

    {"lsn": <the change's LSN>, "lsn_proc": <same>, "lsn_commit": <end LSN of the last complete
     transaction>, "txId": <its transaction>, "ts_usec": <commit time, µs>, "messageType": "INSERT"}

``lsn_commit`` names the last transaction whose changes were *all* handed out: the last change
of a transaction is held back until the next message shows whether the transaction ended, so
its offset already says so. Positions are integers, as Debezium writes them.

**Resuming** from a committed offset (:class:`Resume`, also from an offset Debezium wrote):
transactions that committed before ``lsn_commit`` are skipped whole (the slot, confirmed at
most that far, may send them again); in the transaction ``txId``, changes up to ``lsn`` are
skipped (a run that stopped inside a transaction) -- and where several changes share ``lsn``, only up
to the one the offset names (:data:`LSN_INDEX_KEY`). ``lsn_commit`` means what it means in
Debezium's offsets: the end LSN of the last transaction sent (Debezium stores the position of
the COMMIT message, which the walsender sets to the transaction's ``end_lsn``); a transaction
whose commit record starts before it ends at or before it, which is Debezium's "COMMIT LSN not
greater than the stored one" rule. A transaction is never split in a way that
loses part of it: PostgreSQL decodes committed transactions only, whole, however early they
began, and the slot is confirmed only to the end of a transaction all of whose changes were
handed out -- or, once the read is exhausted, to the read's bound, before which nothing of the
publication is left unread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator

from airflow_copycat.connect.errors import ConnectException

from .model import Begin, Change, Commit, Relation, Truncate
from .pgoutput import PgOutputDecoder

MESSAGE_TYPES = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}

LSN_INDEX_KEY = "copycat_lsn_index"
"""Server offset key: the change's ordinal (from 0) among its transaction's changes at its LSN. The
rows of one multi-insert WAL record (``COPY FROM`` writes up to 1000 rows per record) share the
record's LSN, so ``lsn`` alone does not say which of them were handed out. Written only when the
next change handed out has the same LSN (else every change at ``lsn`` was handed out, which is what
an offset without it means -- Debezium's, whose rule it keeps). Debezium ignores keys it does not know."""


@dataclass(frozen=True)
class Resume:
    """Where a committed offset says the stream stands (all zero/None: nothing streamed yet)."""

    lsn_commit: int = 0
    lsn: int = 0
    tx_id: int | None = None
    index: int | None = None  # the ordinal at ``lsn`` handed out last (None: every change at ``lsn``)

    @classmethod
    def of(cls, offset: dict | None) -> "Resume":
        if not offset:
            return cls()
        tx, index = offset.get("txId"), offset.get(LSN_INDEX_KEY)
        return cls(int(offset.get("lsn_commit") or 0), int(offset.get("lsn") or 0),
                   None if tx is None else int(tx), None if index is None else int(index))

    def handed_out(self, message: Change | Truncate, ordinal: int) -> bool:
        """Whether the change, the ``ordinal``-th of its transaction at its LSN, is covered by the offset:
        of transaction ``txId``, before ``lsn``, or at ``lsn`` up to :attr:`index` (all of them when None)."""
        if self.tx_id is None or message.xid != self.tx_id or message.lsn > self.lsn:
            return False
        return message.lsn < self.lsn or self.index is None or ordinal <= self.index


class Item:
    """A captured change (or truncate) and what its records carry: ``offset`` (see the module
    docstring) and ``last_commit_lsn`` (the commit LSN of the transaction before it, for
    Debezium's ``source.sequence``).

    ``index``: the change's :data:`LSN_INDEX_KEY`, or None when its offset carries none.
    ``offset`` is a dict given as it is, or -- with ``offset=None``, as :class:`StreamRead` hands items
    out -- made when first read from the change, ``lsn_commit`` and ``extra`` (added to it): a change
    that goes in a batch has its offset read only when the framework asks for a row's (a failure, a
    fallback) or it is the batch's last. Not to be changed once handed out."""

    __slots__ = ("message", "last_commit_lsn", "_offset", "_lsn_commit", "_extra", "_index")

    def __init__(self, message: Change | Truncate, offset: dict | None, last_commit_lsn: int | None,
                 lsn_commit: int = 0, extra: dict | None = None, index: int | None = None):
        self.message, self._offset, self.last_commit_lsn = message, offset, last_commit_lsn
        self._lsn_commit, self._extra, self._index = lsn_commit, extra, index

    @property
    def offset(self) -> dict:
        if self._offset is None:
            m = self.message
            kind = "TRUNCATE" if isinstance(m, Truncate) else MESSAGE_TYPES[m.op]
            offset = {"lsn": m.lsn, "lsn_proc": m.lsn, "lsn_commit": self._lsn_commit, "txId": m.xid,
                      "ts_usec": m.commit_ts_us, "messageType": kind}
            if self._index is not None:
                offset[LSN_INDEX_KEY] = self._index
            if self._extra:
                offset.update(self._extra)
            self._offset = offset
        return self._offset

    def __repr__(self) -> str:
        return f"Item({self.message!r}, {self.offset!r}, {self.last_commit_lsn!r})"


class StreamRead:
    """The captured changes of one read of the slot (see the module docstring).

    ``messages`` yields ``(lsn, pgoutput bytes)``; ``captured(relation, commit_lsn)`` says whether a
    table's changes in the transaction whose commit record is at ``commit_lsn`` are wanted (a table
    snapshotted later is wanted only from its boundary on, see :mod:`.partitions`); ``bound`` is the
    position the read was asked to reach; ``extra`` is added to every offset (the stream's tables).
    :attr:`confirmable` is the position up to which every captured change was handed out by
    :meth:`take` (0 before any); :attr:`exhausted` is set once the read ended.
    """

    def __init__(self, messages: Iterator[tuple[int, bytes]], decoder: PgOutputDecoder, resume: Resume,
                 bound: int, captured: Callable[[Relation, int], bool], extra: dict | None = None):
        self._messages = messages
        self.decoder = decoder
        self.resume = resume
        self.bound = bound
        self.captured = captured
        self.extra = dict(extra or {})
        self._final_lsn = 0  # the commit record of the transaction being read
        self.confirmable = 0
        self.exhausted = False
        self.last_tx: tuple[int, int] | None = None  # (xid, commit time) of the last complete transaction
        self.changes = 0  # captured changes handed out
        self._held: Change | Truncate | None = None
        self._held_ordinal = 0
        self._at: tuple[int, int] = (-1, -1)  # (LSN, ordinal) of the transaction's last change decoded
        self._skip_tx = False
        self._last_end = resume.lsn_commit  # end LSN of the last complete transaction
        self._last_commit: int | None = None  # its commit LSN
        self._held_last_commit: int | None = None
        self._failed: BaseException | None = None
        self._last_wanted: tuple = (None, 0, False)

    def take(self, limit: int) -> list[Item]:
        """Up to about ``limit`` items (a transaction's end may add one); ``[]`` once exhausted.

        An error of the read (the connection lost, the slot taken) is raised, and raised again by
        every later call: a read that failed never counts as exhausted, so nothing after the
        failure is ever confirmed."""
        if self._failed is not None:
            raise ConnectException(f"this read of the slot failed earlier ({self._failed}); start a new run") \
                from self._failed
        try:
            return self._take(limit)
        except BaseException as e:
            self._failed = e
            raise

    def _take(self, limit: int) -> list[Item]:
        out: list[Item] = []
        self._last_wanted = (None, 0, False)  # (relation, commit LSN, captured?) of the last change; per take
        decode = self.decoder.decode
        for lsn, data in self._messages:
            message = decode(data, lsn)
            if isinstance(message, (Change, Truncate)):
                at = self._at
                ordinal = at[1] + 1 if at[0] == lsn else 0  # every decoded change counts: the same each read
                self._at = (lsn, ordinal)
                if self._skip_tx or not self._wanted(message, ordinal):
                    continue
                if isinstance(message, Truncate):  # only the captured tables of a TRUNCATE a, b, ...
                    message = replace(message, relations=tuple(r for r in message.relations
                                                               if self.captured(r, self._final_lsn)))
                if self._held is not None:
                    held = self._held
                    out.append(self._item(held, self._last_end,
                                          self._held_ordinal if held.lsn == message.lsn else None))
                self._held, self._held_last_commit, self._held_ordinal = message, self._last_commit, ordinal
                if len(out) >= limit:
                    return out
            elif isinstance(message, Begin):
                r = self.resume
                self._skip_tx = message.final_lsn < r.lsn_commit
                self._final_lsn = message.final_lsn
                self._at = (-1, -1)
            elif isinstance(message, Commit):
                if self._held is not None:  # the transaction's last: every change at its LSN handed out
                    out.append(self._item(self._held, message.end_lsn))
                    self._held = None
                if not self._skip_tx:
                    self.last_tx = (self.decoder.xid, message.commit_ts_us)
                self._skip_tx = False
                self._last_end = max(self._last_end, message.end_lsn)
                self._last_commit = message.commit_lsn
                self.confirmable = max(self.confirmable, message.end_lsn)
                if len(out) >= limit:
                    return out
        if self._held is not None:  # cannot happen with whole transactions; never lose a change
            out.append(self._item(self._held, self._last_end))
            self._held = None
        if not self.exhausted:
            self.exhausted = True
            # every transaction committed before the bound was read: nothing before it is pending
            self.confirmable = max(self.confirmable, self.bound, self._last_end)
        return out

    @property
    def in_transaction(self) -> bool:
        """Whether the last :meth:`take` stopped inside a transaction (``max.batch.size`` reached): some
        of its changes were handed out, the rest (at least the one held back) not yet. Until the next
        take, the position of everything handed out is then the last item's offset, not
        :attr:`confirmable` (the end of the transaction before)."""
        return self._held is not None

    def _wanted(self, message: Change | Truncate, ordinal: int) -> bool:
        r = self.resume
        if r.tx_id is not None and message.xid == r.tx_id and r.handed_out(message, ordinal):
            return False  # handed out (and committed) by an earlier run that stopped inside this transaction
        if isinstance(message, Truncate):
            return any(self.captured(rel, self._final_lsn) for rel in message.relations)
        last = self._last_wanted  # changes come in runs of one table in one transaction
        if last[0] is message.relation and last[1] == self._final_lsn:
            return last[2]
        wanted = self.captured(message.relation, self._final_lsn)
        self._last_wanted = (message.relation, self._final_lsn, wanted)
        return wanted

    def _item(self, message: Change | Truncate, lsn_commit: int, index: int | None = None) -> Item:
        """The held change's item; ``index``: its ordinal at its LSN when the next change shares that LSN."""
        self.changes += 1
        return Item(message, None, self._held_last_commit, lsn_commit, self.extra, index)

    def close(self) -> None:
        close = getattr(self._messages, "close", None)
        if close is not None:
            close()
