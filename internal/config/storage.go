package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/jobplane/jobplane/internal/artifact"
)

// Storage is where artifacts, staged uploads and the logs moved out of the
// database are kept (--artifacts).
type Storage struct {
	// URL is "" (the filesystem store under DATA-DIR/artifacts) or
	// s3://BUCKET/PREFIX?endpoint=URL&region=R.
	URL string
	// CredentialsFile is a shared credentials file (--s3-credentials-file,
	// else AWS_SHARED_CREDENTIALS_FILE); Profile picks its section
	// (AWS_PROFILE, default "default").
	CredentialsFile string
	Profile         string
}

// S3 parses an s3:// URL; ok is false for the filesystem store.
func (s Storage) S3() (cfg artifact.S3Config, ok bool, err error) {
	if s.URL == "" {
		return cfg, false, nil
	}
	cfg, err = artifact.ParseS3URL(s.URL)
	if err != nil {
		return cfg, true, &FieldError{Field: "--artifacts", Message: err.Error()}
	}
	return cfg, true, nil
}

// S3Credentials finds the S3 store's key the way the AWS tools do, minus
// instance metadata: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN) when set, else the credentials file, re-read on each
// signature so that a rotated key is picked up without a restart.
func (s Storage) S3Credentials(getenv func(string) string) (aws.CredentialsProvider, error) {
	if id := getenv("AWS_ACCESS_KEY_ID"); id != "" {
		secret := getenv("AWS_SECRET_ACCESS_KEY")
		if secret == "" {
			return nil, &FieldError{Field: "AWS_SECRET_ACCESS_KEY", Message: "must be set with AWS_ACCESS_KEY_ID"}
		}
		return artifact.StaticCredentials(id, secret, getenv("AWS_SESSION_TOKEN")), nil
	}
	file := s.CredentialsFile
	field := "--s3-credentials-file"
	if file == "" {
		file, field = getenv("AWS_SHARED_CREDENTIALS_FILE"), "AWS_SHARED_CREDENTIALS_FILE"
	}
	if file == "" {
		home := getenv("HOME")
		if home == "" {
			return nil, &FieldError{Field: "--artifacts", Message: "an S3 store needs credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a credentials file"}
		}
		file, field = filepath.Join(home, ".aws", "credentials"), "~/.aws/credentials"
	}
	profile := s.Profile
	if profile == "" {
		profile = getenv("AWS_PROFILE")
	}
	read := func() (aws.Credentials, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return aws.Credentials{}, fmt.Errorf("read S3 credentials: %w", err)
		}
		c, err := artifact.ParseCredentialsFile(b, profile)
		if err != nil {
			return aws.Credentials{}, fmt.Errorf("S3 credentials file %s: %w", file, err)
		}
		return c, nil
	}
	// Read once now, so a missing or broken file stops the server at start
	// with its name, not at the first upload.
	if _, err := read(); err != nil {
		return nil, &FieldError{Field: field, Message: err.Error()}
	}
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return read() }), nil
}
