package server

import (
	"fmt"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/source"
)

// openArtifacts opens the artifact store under the data directory and the
// source broker over the configured repositories.
func openArtifacts(cfg config.Server) (control.ArtifactConfig, *source.Broker, error) {
	fs, err := artifact.OpenFS(cfg.ArtifactDir())
	if err != nil {
		return control.ArtifactConfig{}, nil, err
	}
	out := control.ArtifactConfig{Storage: fs}
	if len(cfg.SourceRepos) == 0 {
		return out, nil, nil
	}
	b, err := source.Open(cfg.SourceRepos, cfg.SourceMirrorDir())
	if err != nil {
		fs.Close()
		return control.ArtifactConfig{}, nil, fmt.Errorf("open source repositories: %w", err)
	}
	out.Sources = b
	return out, b, nil
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
