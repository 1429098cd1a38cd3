package lease

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

func TestRender(t *testing.T) {
	t.Parallel()
	v := Vars{Params: json.RawMessage(`{"account":"1001","n":7,"dry":true,"bad":"a:b","obj":{}}`), Channel: "prod", Job: "backfill",
		Window: time.Date(2026, 8, 14, 2, 30, 0, 0, time.FixedZone("X", 3600))}
	got, err := Render([]Template{
		{Key: "backfill:account:{params.account}"},
		{Key: "schema-migration:{channel}", OnConflict: "reject"},
		{Key: "warehouse-writes", Limit: 4},
		{Key: "rollup:{window.date}:{window.hour}", Once: true},
		{Key: "{job}:{params.n}:{params.dry}"},
	}, v)
	require.NoError(t, err)
	require.Equal(t, []store.LeaseKey{
		{Key: "backfill:7:true", Limit: 1, OnConflict: "queue"},
		{Key: "backfill:account:1001", Limit: 1, OnConflict: "queue"},
		{Key: "rollup:2026-08-14:01", Limit: 1, OnConflict: "queue", Once: true},
		{Key: "schema-migration:prod", Limit: 1, OnConflict: "reject"},
		{Key: "warehouse-writes", Limit: 4, OnConflict: "queue"},
	}, got)

	for name, tmpl := range map[string]string{
		"key confusion through a colon": "acct:{params.bad}",
		"missing param":                 "acct:{params.nope}",
		"object param":                  "acct:{params.obj}",
	} {
		_, err := Render([]Template{{Key: tmpl}}, v)
		var pe *ParamError
		require.ErrorAs(t, err, &pe, name)
	}
}

func TestRenderMergesDuplicates(t *testing.T) {
	t.Parallel()
	got, err := Render([]Template{{Key: "k", Limit: 3}, {Key: "k", Limit: 2, OnConflict: "reject", Once: true}}, Vars{})
	require.NoError(t, err)
	require.Equal(t, []store.LeaseKey{{Key: "k", Limit: 2, OnConflict: "reject", Once: true}}, got)
}

func FuzzRender(f *testing.F) {
	f.Add("backfill:{params.a}", `{"a":"1001"}`)
	f.Add("{channel}:{window.date}", `{}`)
	f.Add("x:{params.a}", `{"a":"../../"}`)
	f.Fuzz(func(t *testing.T, tmpl, params string) {
		keys, err := Render([]Template{{Key: tmpl}}, Vars{Params: json.RawMessage(params), Channel: "prod", Job: "j", Window: time.Unix(0, 0)})
		if err != nil {
			return
		}
		for _, k := range keys {
			require.Regexp(t, `^[A-Za-z0-9:._-]+$`, k.Key)
		}
	})
}
