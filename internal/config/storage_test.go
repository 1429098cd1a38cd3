package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestS3Credentials: the environment's key wins; else the credentials
// file, read again for each signature (a rotated key is used at once); a
// missing file or profile is an error that names where it looked.
func TestS3Credentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := Storage{URL: "s3://b12?endpoint=http://h"}.S3Credentials(envOf(map[string]string{"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := p.Retrieve(ctx); c.AccessKeyID != "AK" || c.SecretAccessKey != "SK" {
		t.Fatalf("from the environment = %+v", c)
	}
	_, err = Storage{}.S3Credentials(envOf(map[string]string{"AWS_ACCESS_KEY_ID": "AK"}))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "AWS_SECRET_ACCESS_KEY" {
		t.Fatalf("a key without its secret = %v, want a FieldError on AWS_SECRET_ACCESS_KEY", err)
	}

	file := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(file, []byte("[ci]\naws_access_key_id = A1\naws_secret_access_key = S1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = Storage{CredentialsFile: file}.S3Credentials(envOf(map[string]string{"AWS_PROFILE": "ci"}))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := p.Retrieve(ctx); c.AccessKeyID != "A1" {
		t.Fatalf("from the file = %+v", c)
	}
	if err := os.WriteFile(file, []byte("[ci]\naws_access_key_id = A2\naws_secret_access_key = S2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, _ := p.Retrieve(ctx); c.AccessKeyID != "A2" {
		t.Fatalf("after rotation = %+v, want A2", c)
	}
	_, err = Storage{}.S3Credentials(envOf(map[string]string{"AWS_SHARED_CREDENTIALS_FILE": file}))
	if !errors.As(err, &fe) || fe.Field != "AWS_SHARED_CREDENTIALS_FILE" {
		t.Fatalf("profile default missing = %v, want a FieldError on AWS_SHARED_CREDENTIALS_FILE", err)
	}
	_, err = Storage{CredentialsFile: filepath.Join(t.TempDir(), "none")}.S3Credentials(envOf(nil))
	if !errors.As(err, &fe) || fe.Field != "--s3-credentials-file" {
		t.Fatalf("missing file = %v, want a FieldError on --s3-credentials-file", err)
	}
}

func TestStorageURL(t *testing.T) {
	t.Parallel()
	if _, ok, err := (Storage{}).S3(); ok || err != nil {
		t.Fatalf("empty URL = %v %v, want the filesystem store", ok, err)
	}
	cfg, ok, err := Storage{URL: "s3://bkt/p?endpoint=http://127.0.0.1:1"}.S3()
	if !ok || err != nil || cfg.Bucket != "bkt" || cfg.Prefix != "p" {
		t.Fatalf("S3() = %+v %v %v", cfg, ok, err)
	}
	_, _, err = Storage{URL: "s3://bkt"}.S3()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "--artifacts" {
		t.Fatalf("no endpoint = %v, want a FieldError on --artifacts", err)
	}
}
