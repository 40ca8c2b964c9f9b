"""The protected resource of the mutual-exclusion checker: a small SQLite
database that checks fencing numbers, as Kleppmann's storage service does.

Every write carries the writer's fencing number and the id of its hold. In
one IMMEDIATE transaction (so writers in many processes are serialised) the
store accepts it when the number is larger than any it has accepted, or
equal to it and from the same hold (one holder writes more than once), and
rejects it otherwise ("stale write rejected"). Every attempt is logged in
order, for the checker to find a stale write that was accepted: a write of
an older hold accepted after a newer hold had written.
"""
# SPDX-License-Identifier: BSD-3-Clause

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS state(id INTEGER PRIMARY KEY CHECK (id = 1), fence INTEGER NOT NULL, hold TEXT);
INSERT OR IGNORE INTO state VALUES (1, 0, NULL);
CREATE TABLE IF NOT EXISTS log(seq INTEGER PRIMARY KEY, fence INTEGER NOT NULL, hold TEXT NOT NULL,
                               kind TEXT NOT NULL, accepted INTEGER NOT NULL);
"""


class Store:
    def __init__(self, path):
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=OFF")

    @staticmethod
    def create(path):
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA)
        db.close()

    def write(self, fence, hold, kind):
        """Returns True when the write was accepted."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            ok = write_in(db, fence, hold, kind)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return ok


def write_in(db, fence, hold, kind):
    """The store's rule, applied in the transaction db has open (a job whose
    own transaction is the write: checker_xact.py). True when accepted."""
    top, top_hold = db.execute("SELECT fence, hold FROM state").fetchone()
    ok = fence > top or (fence == top and hold == top_hold)
    if ok:
        db.execute("UPDATE state SET fence = ?, hold = ?", (fence, hold))
    db.execute("INSERT INTO log(fence, hold, kind, accepted) VALUES (?, ?, ?, ?)", (fence, hold, kind, int(ok)))
    return ok


def read_log(path):
    """[(fence, hold, kind, accepted)] in the order the store saw them."""
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT fence, hold, kind, accepted FROM log ORDER BY seq").fetchall()
    finally:
        db.close()
