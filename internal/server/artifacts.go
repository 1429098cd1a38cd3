package server

import (
	"context"
	"fmt"
	"os"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/source"
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
// configured repositories.
func openArtifacts(ctx context.Context, cfg config.Server) (control.ArtifactConfig, objectStore, *source.Broker, error) {
	objs, err := openStorage(ctx, cfg)
	if err != nil {
		return control.ArtifactConfig{}, nil, nil, err
	}
	out := control.ArtifactConfig{Storage: objs}
	if len(cfg.SourceRepos) == 0 {
		return out, objs, nil, nil
	}
	b, err := source.Open(cfg.SourceRepos, cfg.SourceMirrorDir())
	if err != nil {
		objs.Close()
		return control.ArtifactConfig{}, nil, nil, fmt.Errorf("open source repositories: %w", err)
	}
	out.Sources = b
	return out, objs, b, nil
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
