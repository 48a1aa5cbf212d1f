"""StreamRead's offsets and resume rule over decoded messages (no database): changes that share one LSN
(the rows of one multi-insert WAL record) are told apart by ``copycat_lsn_index``, so a resume from the
offset of any change handed out -- the framework may commit any row's -- sends exactly the changes after it."""

from __future__ import annotations

from airflow_copycat.connectors.postgres_cdc.model import Begin, Change, Column, Commit, Relation
from airflow_copycat.connectors.postgres_cdc.stream import LSN_INDEX_KEY, Resume, StreamRead

T = Relation(1, "public", "t", (Column("id", 23, key=True),))
LSNS = [100, 100, 100, 200, 300, 300]  # three rows of one record, one row, two rows of another record


class _Decoder:
    """Hands the messages out as they are (``data`` is the message), tracking the transaction's xid."""

    xid = 0

    def decode(self, data, lsn):
        if isinstance(data, Begin):
            self.xid = data.xid
        return data


def _messages() -> list[tuple[int, object]]:
    changes = [(lsn, Change(T, "c", None, (str(i),), lsn=lsn, xid=7, commit_ts_us=1)) for i, lsn in enumerate(LSNS)]
    return [(90, Begin(490, 1, 7)), *changes, (490, Commit(490, 510, 1))]


def _read(resume: Resume, limit: int = 1) -> list:
    read = StreamRead(iter(_messages()), _Decoder(), resume, 1000, lambda relation, commit_lsn: True)
    items = []
    while batch := read.take(limit):
        items += batch
    return items


def _ids(items) -> list[int]:
    return [int(item.message.after[0]) for item in items]


def test_changes_sharing_an_lsn_carry_their_ordinal_while_the_next_shares_it():
    offsets = [item.offset for item in _read(Resume())]
    assert [o["lsn"] for o in offsets] == LSNS
    assert [o.get(LSN_INDEX_KEY) for o in offsets] == [0, 1, None, None, 0, None]


def test_a_resume_from_any_change_sends_exactly_the_changes_after_it():
    items = _read(Resume())
    for k, item in enumerate(items):
        assert _ids(_read(Resume.of(item.offset), limit=2)) == list(range(k + 1, len(LSNS))), item.offset


def test_an_offset_without_the_ordinal_covers_every_change_at_its_lsn():
    # Debezium's offset (no copycat_lsn_index) inside the transaction, at the first record's LSN
    debezium = {"lsn": 100, "lsn_proc": 100, "lsn_commit": 50, "txId": 7, "ts_usec": 1, "messageType": "INSERT"}
    assert _ids(_read(Resume.of(debezium))) == [3, 4, 5]
