package sqlite_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/storetest"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return testdb.SQLite(t) })
}
