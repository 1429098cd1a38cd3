-- The audit hash chain (docs/operations.md "Audit").
--
-- Events stay as written; their chain links live in audit_chain, appended by
-- the sealer after the events committed. Both tables are append-only: a
-- trigger refuses UPDATE, DELETE and TRUNCATE for every role that has not
-- switched triggers off, and jobplane_grant_app_role() gives the server's
-- role INSERT and SELECT only, so that only a superuser or the owner can
-- edit history, and the chain, checked against an external checkpoint,
-- shows it.

-- The writing transaction's ID, assigned before the event's sequence number
-- is drawn: the sealer uses it to know when no transaction that drew a lower
-- number can still commit (AuditHorizon).
ALTER TABLE audit_events ADD COLUMN xid xid8;

CREATE TABLE audit_chain (
    seq       BIGINT PRIMARY KEY,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL,
    sealed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX audit_events_actor ON audit_events (tenant, actor, seq);

CREATE FUNCTION jobplane_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'jobplane: % on % refused: audit history is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION jobplane_audit_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION jobplane_audit_append_only();
CREATE TRIGGER audit_chain_append_only BEFORE UPDATE OR DELETE ON audit_chain
    FOR EACH ROW EXECUTE FUNCTION jobplane_audit_append_only();
CREATE TRIGGER audit_chain_no_truncate BEFORE TRUNCATE ON audit_chain
    FOR EACH STATEMENT EXECUTE FUNCTION jobplane_audit_append_only();

REVOKE UPDATE, DELETE, TRUNCATE ON audit_events, audit_chain FROM PUBLIC;

-- jobplane_grant_app_role gives the role the server connects as what it
-- needs in this schema and no more on the audit tables. Run it as the owner
-- (the role that applied the migrations) after every upgrade, since new
-- tables need grants too.
CREATE FUNCTION jobplane_grant_app_role(app name) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), app);
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() LOOP
        IF t.tablename IN ('audit_events', 'audit_chain') THEN
            EXECUTE format('REVOKE ALL ON %I FROM %I', t.tablename, app);
            EXECUTE format('GRANT SELECT, INSERT ON %I TO %I', t.tablename, app);
        ELSE
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO %I', t.tablename, app);
        END IF;
    END LOOP;
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO %I', current_schema(), app);
END
$$;
