package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestGenericPlanMark: a statement marked generic runs with a generic plan
// (plan_cache_mode force_generic_plan) and sequential scans disabled, and
// both settings are back to what they were for the next statement, in a
// transaction and on the pool, with a scope to declare and without; the
// scope is declared as well.
func TestGenericPlanMark(t *testing.T) {
	s := testdb.Postgres(t).(*postgres.Store)
	def, err := postgres.PoolStrings(context.Background(), s, `SELECT current_setting('plan_cache_mode')`)
	require.NoError(t, err)
	if def[0] == "force_generic_plan" {
		t.Skip("the server's default is force_generic_plan: the mark cannot be told apart")
	}
	mode := `SELECT current_setting('plan_cache_mode') || current_setting('enable_seqscan') || '/' || coalesce(current_setting('app.tenant_id', true), '')`
	for _, c := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"unscoped", context.Background(), ""},
		{"tenant", store.WithTenant(context.Background(), "tn_generic"), "tn_generic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := postgres.TxStringsSeq(c.ctx, s, postgres.Generic(mode), mode, postgres.Generic(mode), mode)
			require.NoError(t, err)
			require.Equal(t, [][]string{
				{"force_generic_planoff/" + c.want}, {def[0] + "on/" + c.want}, {"force_generic_planoff/" + c.want}, {def[0] + "on/" + c.want},
			}, got, "in a transaction")

			one, err := postgres.PoolStrings(c.ctx, s, postgres.Generic(mode))
			require.NoError(t, err)
			require.Equal(t, []string{"force_generic_planoff/" + c.want}, one, "on the pool")
			for range 4 { // every pooled connection is back to the default
				one, err = postgres.PoolStrings(c.ctx, s, mode)
				require.NoError(t, err)
				require.Equal(t, []string{def[0] + "on/" + c.want}, one, "on the pool, after")
			}
		})
	}
	t.Run("settings of the transaction", func(t *testing.T) {
		mode := `SELECT current_setting('plan_cache_mode') || current_setting('enable_seqscan')`
		got, err := postgres.TxStringsSeq(context.Background(), s, `SET LOCAL plan_cache_mode = force_custom_plan`,
			`SET LOCAL enable_seqscan = off`, postgres.Generic(mode), mode)
		require.NoError(t, err)
		require.Equal(t, []string{"force_generic_planoff"}, got[2])
		require.Equal(t, []string{"force_custom_planoff"}, got[3],
			"the next statement gets the transaction's own settings back")
	})
}
