-- Row-level security as a backstop for tenant isolation (RELIABILITY MT3,
-- docs/operations.md "Row-level security").
--
-- Every store transaction starts by declaring its scope with
-- set_config(..., true), which lasts until the transaction ends, so a
-- pooled connection never carries a scope into the next transaction:
--   app.tenant_id  the one tenant whose rows it may see and write;
--   app.system     the name of cross-tenant control-plane work (reaper,
--                  scheduler, audit sealer, outbox, webhook intake, lookups
--                  by a credential), which may see every tenant.
-- A transaction that declared neither sees no tenant-owned row and cannot
-- write one. FORCE makes the policies bind the owner too; only a superuser
-- or a role with BYPASSRLS escapes them, and the server must be neither.
-- Foreign key and unique checks bypass row security by design, so a
-- conflict with another tenant's row still refuses the write.

CREATE FUNCTION jobplane_rls_system() RETURNS boolean LANGUAGE sql STABLE AS
$$ SELECT coalesce(current_setting('app.system', true), '') <> '' $$;

CREATE FUNCTION jobplane_rls_tenant() RETURNS text LANGUAGE sql STABLE AS
$$ SELECT nullif(current_setting('app.tenant_id', true), '') $$;

DO $$
DECLARE
    t text;
BEGIN
    -- Tables with a tenant column.
    FOREACH t IN ARRAY ARRAY['principals', 'runs', 'attempts', 'runners', 'reg_tokens',
        'audit_events', 'secrets', 'credentials', 'catalogs', 'lease_keys', 'leases',
        'schedules', 'artifacts', 'source_tickets', 'github_installations',
        'github_check_runs', 'github_check_outbox'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I
            USING (jobplane_rls_system() OR tenant = jobplane_rls_tenant())
            WITH CHECK (jobplane_rls_system() OR tenant = jobplane_rls_tenant())', t);
    END LOOP;
END
$$;

-- Tenant-owned tables without a tenant column belong to the tenant of their
-- parent row; the parent's own policy decides whether the subquery sees it.
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenants
    USING (jobplane_rls_system() OR id = jobplane_rls_tenant())
    WITH CHECK (jobplane_rls_system() OR id = jobplane_rls_tenant());

ALTER TABLE api_tokens ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_tokens FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON api_tokens
    USING (jobplane_rls_system() OR EXISTS (SELECT 1 FROM principals p WHERE p.id = principal_id))
    WITH CHECK (jobplane_rls_system() OR EXISTS (SELECT 1 FROM principals p WHERE p.id = principal_id));

ALTER TABLE approvals ENABLE ROW LEVEL SECURITY;
ALTER TABLE approvals FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON approvals
    USING (jobplane_rls_system() OR EXISTS (SELECT 1 FROM runs r WHERE r.id = run_id))
    WITH CHECK (jobplane_rls_system() OR EXISTS (SELECT 1 FROM runs r WHERE r.id = run_id));

ALTER TABLE log_lines ENABLE ROW LEVEL SECURITY;
ALTER TABLE log_lines FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON log_lines
    USING (jobplane_rls_system() OR EXISTS (SELECT 1 FROM runs r WHERE r.id = run_id))
    WITH CHECK (jobplane_rls_system() OR EXISTS (SELECT 1 FROM runs r WHERE r.id = run_id));

ALTER TABLE nonces ENABLE ROW LEVEL SECURITY;
ALTER TABLE nonces FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON nonces
    USING (jobplane_rls_system() OR EXISTS (SELECT 1 FROM runners r WHERE r.id = runner_id))
    WITH CHECK (jobplane_rls_system() OR EXISTS (SELECT 1 FROM runners r WHERE r.id = runner_id));

ALTER TABLE github_repositories ENABLE ROW LEVEL SECURITY;
ALTER TABLE github_repositories FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON github_repositories
    USING (jobplane_rls_system() OR EXISTS (SELECT 1 FROM github_installations i WHERE i.installation_id = github_repositories.installation_id))
    WITH CHECK (jobplane_rls_system() OR EXISTS (SELECT 1 FROM github_installations i WHERE i.installation_id = github_repositories.installation_id));
