//go:build deps

package deps

import (
	_ "cel.dev/cel-go/cel"
	_ "github.com/alecthomas/kong"
	_ "github.com/anishathalye/porcupine"
	_ "github.com/go-git/go-git/v5"
	_ "github.com/go-jose/go-jose/v4"
	_ "github.com/goccy/go-yaml"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/robfig/cron/v3"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "github.com/stretchr/testify/require"
	_ "go.uber.org/goleak"
	_ "modernc.org/sqlite"
	_ "pgregory.net/rapid"
)
