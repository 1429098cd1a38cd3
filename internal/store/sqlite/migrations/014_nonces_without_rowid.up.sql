-- Every signed request inserts a nonce. As a rowid table, nonces kept its
-- rows and its primary key in two b-trees (three with the expiry index), each
-- a page to write at commit on the single writer; WITHOUT ROWID keeps the rows
-- in the primary key's b-tree.
CREATE TABLE nonces_014 (
    runner_id  TEXT NOT NULL,
    nonce      TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (runner_id, nonce)
) WITHOUT ROWID;
INSERT INTO nonces_014 (runner_id, nonce, expires_at) SELECT runner_id, nonce, expires_at FROM nonces;
DROP TABLE nonces;
ALTER TABLE nonces_014 RENAME TO nonces;
CREATE INDEX nonces_expires_at ON nonces (expires_at);
