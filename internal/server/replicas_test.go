package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestSecondReplicaNeedsTheSharedKey: two servers on one database with
// different data directories. Without JOBPLANE_SECRET_KEY the second
// refuses to start and says what to do; with the first's key it starts.
func TestSecondReplicaNeedsTheSharedKey(t *testing.T) {
	t.Parallel()
	dbs := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "jobplane.db") },
		"postgres": func(t *testing.T) string { return testdb.PostgresDSN(t) },
	}
	for name, db := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			repo := t.TempDir()
			_, err := gitsync.InitRepo(repo, "main", map[string]string{"jobs/greet.yaml": "name: greet\nrun:\n  command: [\"true\"]\n"}, "init")
			require.NoError(t, err)
			dsn := db(t)
			ctx := context.Background()
			cfg := func(dataDir, key string) config.Server {
				return config.Server{Listen: "127.0.0.1:0", DB: dsn, Definitions: repo, Channels: map[string]string{"prod": "main"},
					DataDir: dataDir, SecretKey: key}
			}
			stop := func(s *server.Server) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, s.Stop(ctx))
			}
			first := t.TempDir()
			a, err := server.Start(ctx, cfg(first, ""), server.Options{})
			require.NoError(t, err)
			defer stop(a)

			_, err = server.Start(ctx, cfg(t.TempDir(), ""), server.Options{})
			require.Error(t, err)
			require.Contains(t, err.Error(), creds.EnvServerKey, "the error says what to do")
			require.Contains(t, err.Error(), "same key")

			key, err := os.ReadFile(filepath.Join(first, creds.ServerKeyFile))
			require.NoError(t, err)
			b, err := server.Start(ctx, cfg(t.TempDir(), strings.TrimSpace(string(key))), server.Options{})
			require.NoError(t, err)
			stop(b)
		})
	}
}
