package api_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func TestListSchedules(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		files := maps.Clone(testDefinitions)
		files["jobs/nightly.yaml"] = `name: nightly
description: Scheduled
run:
  command: ["true"]
schedule: {cron: "30 2 * * *", tz: Europe/Paris, channel: prod, catch_up: none}
`
		e := newEnvFiles(t, st, files)
		get := func() map[string][]map[string]any {
			req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/schedules", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := e.srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var v map[string][]map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
			return v
		}
		v := get()
		require.Len(t, v["schedules"], 1)
		s := v["schedules"][0]
		require.Equal(t, "nightly", s["job"])
		require.Equal(t, "prod", s["channel"])
		require.Equal(t, "30 2 * * *", s["cron"])
		require.Equal(t, "Europe/Paris", s["tz"])
		require.Equal(t, "none", s["catch_up"])
		require.Nil(t, s["last_window"])
		// The clock is at 2026-11-01 12:00 UTC: next is 02:30 CET on the 2nd.
		require.Equal(t, time.Date(2026, 11, 2, 1, 30, 0, 0, time.UTC).Format(time.RFC3339), s["next_fire_at"])

		// After a pass the stored state is shown.
		_, err := e.sched.Fire(e.ctx())
		require.NoError(t, err)
		require.Equal(t, s["next_fire_at"], get()["schedules"][0]["next_fire_at"])

		req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/schedules", nil)
		require.NoError(t, err)
		resp, err := e.srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})
}
