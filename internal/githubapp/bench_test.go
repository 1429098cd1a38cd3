package githubapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// BenchmarkGitHubDelivery measures processing one installation_repositories
// delivery (record, binding, one repository, audit event, in one
// transaction), then a redelivery of it (answered "duplicate").
func BenchmarkGitHubDelivery(b *testing.B) {
	for _, backend := range []struct {
		name string
		open func(testing.TB) store.Store
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		b.Run(backend.name, func(b *testing.B) {
			_, svc := wire(b, control.Config{Store: backend.open(b)}, githubapp.Config{})
			ctx := context.Background()
			delivery := func(i int) githubapp.Delivery {
				body, _ := json.Marshal(map[string]any{"action": "added",
					"installation":       map[string]any{"id": 1, "account": map[string]any{"login": "acme", "type": "Organization"}},
					"repositories_added": []map[string]any{{"id": i + 1, "full_name": fmt.Sprintf("acme/r%d", i), "private": true}}})
				return githubapp.Delivery{ID: fmt.Sprintf("d-%d", i), Event: "installation_repositories", Body: body}
			}
			b.Run("processed", func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					if out, err := svc.HandleDelivery(ctx, delivery(i)); err != nil || out != githubapp.Processed {
						b.Fatal(out, err)
					}
				}
			})
			first := delivery(0)
			b.Run("duplicate", func(b *testing.B) {
				for b.Loop() {
					if out, err := svc.HandleDelivery(ctx, first); err != nil || out != githubapp.Duplicate {
						b.Fatal(out, err)
					}
				}
			})
		})
	}
}
