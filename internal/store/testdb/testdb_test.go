package testdb_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func TestEach(t *testing.T) {
	var ran []string
	testdb.Each(t, func(t *testing.T, s store.Store) {
		ran = append(ran, t.Name())
		if err := s.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Stores are isolated: a fresh one has no tenants yet.
		if _, err := s.TenantEnsure(context.Background(), "default", nil); err != nil {
			t.Fatal(err)
		}
	})
	if len(ran) != 2 {
		t.Fatalf("ran %v", ran)
	}
}

// TestPostgresDSN: server replicas starting together on the empty schema of
// the DSN migrate it once, without racing.
func TestPostgresDSN(t *testing.T) {
	dsn := testdb.PostgresDSN(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			_, err = s.TenantEnsure(ctx, "default", nil)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
