-- The audit hash chain (docs/operations.md "Audit"). Events stay as written;
-- their chain links are appended to audit_chain by the sealer. SQLite has no
-- roles: the triggers stop the server (and careless hands) from rewriting
-- history, and whoever can write the file can still do it, which the chain,
-- checked against an external checkpoint, shows.

CREATE TABLE audit_chain (
    seq       INTEGER PRIMARY KEY,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL,
    sealed_at INTEGER NOT NULL
);

CREATE INDEX audit_events_actor ON audit_events (tenant, actor, seq);

CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN SELECT RAISE(ABORT, 'jobplane: UPDATE on audit_events refused: audit history is append-only'); END;
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
BEGIN SELECT RAISE(ABORT, 'jobplane: DELETE on audit_events refused: audit history is append-only'); END;
CREATE TRIGGER audit_chain_no_update BEFORE UPDATE ON audit_chain
BEGIN SELECT RAISE(ABORT, 'jobplane: UPDATE on audit_chain refused: audit history is append-only'); END;
CREATE TRIGGER audit_chain_no_delete BEFORE DELETE ON audit_chain
BEGIN SELECT RAISE(ABORT, 'jobplane: DELETE on audit_chain refused: audit history is append-only'); END;
