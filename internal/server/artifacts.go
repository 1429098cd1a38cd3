package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/jobplane/jobplane/internal/artifact"
	artbroker "github.com/jobplane/jobplane/internal/artifact/broker"
	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/source"
	"github.com/jobplane/jobplane/internal/source/tickets"
	"github.com/jobplane/jobplane/internal/store"
)

// objectStore is a Storage the server closes when it stops.
type objectStore interface {
	artifact.Storage
	Close() error
}

// openStorage opens the object store --artifacts names: the filesystem
// store under the data directory by default, or an S3 bucket, whose
// credentials come from the environment or a credentials file.
func openStorage(ctx context.Context, cfg config.Server) (objectStore, error) {
	s3cfg, isS3, err := cfg.Storage.S3()
	if err != nil {
		return nil, err
	}
	if !isS3 {
		return artifact.OpenFS(cfg.ArtifactDir())
	}
	s3cfg.Credentials, err = cfg.Storage.S3Credentials(os.Getenv)
	if err != nil {
		return nil, err
	}
	st, err := artifact.OpenS3(ctx, s3cfg)
	if err != nil {
		return nil, fmt.Errorf("--artifacts: %w", err)
	}
	return st, nil
}

// openArtifacts opens the object store and the source broker over the
// configured repositories (nil when there are none).
func openArtifacts(ctx context.Context, cfg config.Server) (objectStore, *source.Broker, error) {
	objs, err := openStorage(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if len(cfg.SourceRepos) == 0 {
		return objs, nil, nil
	}
	b, err := source.Open(cfg.SourceRepos, cfg.SourceMirrorDir())
	if err != nil {
		objs.Close()
		return nil, nil, fmt.Errorf("open source repositories: %w", err)
	}
	return objs, b, nil
}

// artifactServices builds the artifact service and the source ticket
// service over the run service: the configured repositories' archives come
// from sources, GitHub repositories' from the App.
func artifactServices(st store.Store, objs artifact.Storage, sources *source.Broker, svc *control.Service, ghapp *githubapp.Service,
	apiURL string, clk clock.Clock, log *slog.Logger) (*artbroker.Service, *tickets.Service) {
	arts := artbroker.New(artbroker.Config{Store: st, Clock: clk, Logger: log, Runs: svc, Storage: objs, APIURL: apiURL})
	tcfg := tickets.Config{Store: st, Clock: clk, Runs: svc, APIURL: apiURL}
	if sources != nil {
		tcfg.Repos = sources
	}
	if ghapp != nil {
		tcfg.Hosted = ghapp
	}
	return arts, tickets.New(tcfg)
}

func specArtifacts(j *catalog.Job) []protocol.ArtifactSpec {
	var out []protocol.ArtifactSpec
	for _, a := range j.Artifacts {
		out = append(out, protocol.ArtifactSpec{Name: a.Name, Role: a.Role, MaxBytes: a.MaxBytes})
	}
	return out
}

func specSource(j *catalog.Job) *control.SpecSource {
	if j.Source == nil {
		return nil
	}
	return &control.SpecSource{Repo: j.Source.Repo, Branch: j.Source.Branch}
}
