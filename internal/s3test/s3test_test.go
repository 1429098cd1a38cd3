package s3test_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithy "github.com/aws/smithy-go"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/s3test"
)

func TestMain(m *testing.M) {
	code := s3test.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// TestServer checks what the S3 store relies on: buckets, signed requests
// of the one identity only, and If-None-Match: * refusing an existing key.
func TestServer(t *testing.T) {
	t.Parallel()
	s := s3test.Shared(t)
	bucket := s.Bucket(t)
	c := s.Client()
	ctx := context.Background()
	put := func(body string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("a/b"), Body: strings.NewReader(body), IfNoneMatch: aws.String("*")})
		return err
	}
	if err := put("one"); err != nil {
		t.Fatalf("first conditional put: %v", err)
	}
	err := put("two")
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "PreconditionFailed" {
		t.Fatalf("second conditional put = %v, want PreconditionFailed", err)
	}
	bad := s3.New(s3.Options{Region: s3test.Region, BaseEndpoint: aws.String(s.Endpoint), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: "wrong"}, nil
		})})
	if _, err := bad.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)}); err == nil {
		t.Fatal("a request signed with the wrong secret was answered")
	}
}

// TestRestart stops a server of the test's own and starts it again: the
// fault tests rely on objects surviving that.
func TestRestart(t *testing.T) {
	t.Parallel()
	s := s3test.Start(t)
	bucket := s.Bucket(t)
	c := s.Client()
	ctx := context.Background()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("kept")}); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	t.Log("stopped")
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")}); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Restart(t)
	t.Log("restarted")
	if os.Getenv("S3TEST_DUMP") != "" {
		t.Log(s.LogTail())
	}
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")}); err != nil {
		t.Fatalf("object after restart: %v", err)
	}
}
