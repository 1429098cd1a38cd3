package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Defaults of the S3 store.
const (
	// DefaultPartSize is the size of one part of a multipart upload, and
	// so the memory one upload in flight holds: S3 wants parts of 5 MiB at
	// least (the last one excepted).
	DefaultPartSize = 8 << 20
	// MinPartSize is S3's smallest part but the last.
	MinPartSize = 5 << 20
	// DefaultRequestTimeout bounds one request that moves no body (create,
	// complete, abort, delete, head), so a hung store fails the upload
	// with ErrUnavailable instead of holding it.
	DefaultRequestTimeout = 30 * time.Second
)

// S3Config says where an S3 store keeps its objects.
type S3Config struct {
	// Bucket holds the objects; it must exist.
	Bucket string
	// Prefix is put before every key ("" or a path without leading or
	// trailing slash), so that one bucket can serve several installations.
	Prefix string
	// Endpoint is the server's URL (required: jobplane addresses buckets
	// by path, as self-hosted servers need).
	Endpoint string
	// Region signs requests (default us-east-1).
	Region string
	// Credentials signs requests.
	Credentials aws.CredentialsProvider
	// HTTPClient sends requests (default: a client of its own).
	HTTPClient *http.Client
	// PartSize is the size of a multipart upload's parts (default
	// DefaultPartSize).
	PartSize int64
	// RequestTimeout bounds requests without a body (default
	// DefaultRequestTimeout).
	RequestTimeout time.Duration
}

// bucketRE is S3's rule for bucket names that path-style addressing can
// carry.
var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// ParseS3URL reads s3://BUCKET[/PREFIX]?endpoint=URL[&region=R]. The
// returned config has no credentials yet.
func ParseS3URL(raw string) (S3Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return S3Config{}, fmt.Errorf("parse %q: %w", raw, err)
	}
	if u.Scheme != "s3" {
		return S3Config{}, fmt.Errorf("%q: scheme must be s3", raw)
	}
	if u.User != nil || u.Fragment != "" {
		return S3Config{}, fmt.Errorf("%q: no user or fragment allowed (credentials come from the environment or a file)", raw)
	}
	c := S3Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if !bucketRE.MatchString(c.Bucket) {
		return S3Config{}, fmt.Errorf("%q: bucket %q must be 3 to 63 lowercase letters, digits, dots and hyphens", raw, c.Bucket)
	}
	if c.Prefix != "" && (path.Clean(c.Prefix) != c.Prefix || strings.HasPrefix(c.Prefix, ".")) {
		return S3Config{}, fmt.Errorf("%q: prefix %q must be a clean path", raw, c.Prefix)
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region":
		default:
			return S3Config{}, fmt.Errorf("%q: unknown parameter %q (endpoint, region)", raw, k)
		}
	}
	c.Endpoint, c.Region = q.Get("endpoint"), q.Get("region")
	e, err := url.Parse(c.Endpoint)
	if c.Endpoint == "" || err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
		return S3Config{}, fmt.Errorf("%q: endpoint must be an http or https URL", raw)
	}
	return c, nil
}

// S3 is a Storage in a bucket of an S3-compatible server.
//
// An upload streams through a buffer of one part: a body that fits in one
// part is staged in that buffer and published with one PutObject, a larger
// one as a multipart upload of the final key, whose parts are invisible
// until CompleteMultipartUpload publishes them. Both publishing calls carry
// If-None-Match: *, so an existing object is never overwritten, even by a
// replica racing this one. A crash leaves at most an incomplete multipart
// upload, which SweepStaged aborts.
type S3 struct {
	c        *s3.Client
	cfg      S3Config
	httpc    *http.Client
	ownHTTP  bool
	partPool sync.Pool
}

var _ Storage = (*S3)(nil)

// OpenS3 opens a bucket and checks that it answers.
func OpenS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize <= 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.PartSize < MinPartSize {
		return nil, fmt.Errorf("part size %d: S3 needs parts of %d bytes at least", cfg.PartSize, MinPartSize)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	st := &S3{cfg: cfg, httpc: cfg.HTTPClient}
	if st.httpc == nil {
		st.httpc = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: cfg.RequestTimeout,
		}}
		st.ownHTTP = true
	}
	st.c = s3.New(s3.Options{
		Region:       cfg.Region,
		BaseEndpoint: aws.String(cfg.Endpoint),
		UsePathStyle: true,
		Credentials:  cfg.Credentials,
		HTTPClient:   st.httpc,
		// The SDK's default trailing checksums (aws-chunked bodies) are not
		// understood by every S3-compatible server; a signed payload hash
		// already lets the server check every byte of a part.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	st.partPool.New = func() any { b := make([]byte, cfg.PartSize); return &b }
	hctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	if _, err := st.c.HeadBucket(hctx, &s3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)}); err != nil {
		st.Close()
		return nil, fmt.Errorf("open bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, classify(err))
	}
	return st, nil
}

// Close drops idle connections.
func (s *S3) Close() error {
	if s.ownHTTP {
		s.httpc.CloseIdleConnections()
	}
	return nil
}

func (s *S3) object(key string) *string {
	if s.cfg.Prefix == "" {
		return aws.String(key)
	}
	return aws.String(s.cfg.Prefix + "/" + key)
}

func (s *S3) short(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// Stage reads r part by part into a buffer while hashing it; see S3.
func (s *S3) Stage(ctx context.Context, key string, r io.Reader, max int64) (Staged, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	bufp := s.partPool.Get().(*[]byte)
	st := &s3Staged{s: s, key: key, h: sha256.New(), bufp: bufp}
	// One byte more than allowed tells "exactly max" from "too large"
	// without reading any further.
	src := io.LimitReader(ctxReader{ctx, r}, max+1)
	for {
		n, rerr := io.ReadFull(src, *bufp)
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			st.abort()
			return nil, rerr
		}
		st.size += int64(n)
		if st.size > max {
			st.abort()
			return nil, fmt.Errorf("more than %d bytes: %w", max, ErrTooLarge)
		}
		st.h.Write((*bufp)[:n])
		last := n < len(*bufp)
		if last && st.uploadID == "" {
			st.small = (*bufp)[:n] // fits in one part: published by one PutObject
			break
		}
		if n > 0 {
			if err := st.uploadPart(ctx, (*bufp)[:n]); err != nil {
				st.abort()
				return nil, err
			}
		}
		if last {
			break
		}
	}
	st.sum = hex.EncodeToString(st.h.Sum(nil))
	if st.uploadID != "" {
		s.partPool.Put(bufp)
		st.bufp = nil
	}
	return st, nil
}

type s3Staged struct {
	s         *S3
	key       string
	h         hash.Hash
	bufp      *[]byte
	small     []byte
	uploadID  string
	parts     []types.CompletedPart
	size      int64
	sum       string
	published bool
	done      bool
}

func (st *s3Staged) Size() int64    { return st.size }
func (st *s3Staged) SHA256() string { return st.sum }

func (st *s3Staged) uploadPart(ctx context.Context, b []byte) error {
	if st.uploadID == "" {
		cctx, cancel := st.s.short(ctx)
		out, err := st.s.c.CreateMultipartUpload(cctx, &s3.CreateMultipartUploadInput{
			Bucket: aws.String(st.s.cfg.Bucket), Key: st.s.object(st.key), ContentType: aws.String("application/octet-stream"),
		})
		cancel()
		if err != nil {
			return fmt.Errorf("stage %s: %w", st.key, classify(err))
		}
		st.uploadID = aws.ToString(out.UploadId)
	}
	num := int32(len(st.parts) + 1)
	// A part's body is a bytes.Reader: the SDK can sign its hash and
	// resend it on a retry.
	out, err := st.s.c.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: aws.String(st.s.cfg.Bucket), Key: st.s.object(st.key), UploadId: aws.String(st.uploadID),
		PartNumber: aws.Int32(num), Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b))),
	})
	if err != nil {
		return fmt.Errorf("stage %s part %d: %w", st.key, num, classify(err))
	}
	st.parts = append(st.parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
	return nil
}

// Publish writes the object create-exclusive (If-None-Match: *).
func (st *s3Staged) Publish(ctx context.Context) error {
	if st.done {
		return fmt.Errorf("publish %s: already published or discarded", st.key)
	}
	cctx, cancel := st.s.short(ctx)
	defer cancel()
	var err error
	if st.uploadID == "" {
		_, err = st.s.c.PutObject(cctx, &s3.PutObjectInput{
			Bucket: aws.String(st.s.cfg.Bucket), Key: st.s.object(st.key), Body: bytes.NewReader(st.small),
			ContentLength: aws.Int64(int64(len(st.small))), ContentType: aws.String("application/octet-stream"),
			IfNoneMatch: aws.String("*"),
		})
	} else {
		_, err = st.s.c.CompleteMultipartUpload(cctx, &s3.CompleteMultipartUploadInput{
			Bucket: aws.String(st.s.cfg.Bucket), Key: st.s.object(st.key), UploadId: aws.String(st.uploadID),
			MultipartUpload: &types.CompletedMultipartUpload{Parts: st.parts},
			IfNoneMatch:     aws.String("*"),
		})
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", st.key, classify(err))
	}
	st.published = true
	st.release()
	return nil
}

// Discard aborts the multipart upload, or drops the buffer.
func (st *s3Staged) Discard() error {
	if st.published || st.done {
		return nil
	}
	st.abort()
	return nil
}

// abort runs even when the request's context has ended: parts left behind
// take space until SweepStaged finds them.
func (st *s3Staged) abort() {
	if st.uploadID != "" {
		ctx, cancel := st.s.short(context.Background())
		_, _ = st.s.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(st.s.cfg.Bucket), Key: st.s.object(st.key), UploadId: aws.String(st.uploadID),
		})
		cancel()
	}
	st.release()
}

func (st *s3Staged) release() {
	st.done = true
	if st.bufp != nil {
		st.s.partPool.Put(st.bufp)
		st.bufp, st.small = nil, nil
	}
}

// Open streams a published object.
func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.get(ctx, key, "")
}

// OpenRange streams n bytes of a published object from offset off.
func (s *S3) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("open %s: bad range %d+%d", key, off, n)
	}
	return s.get(ctx, key, fmt.Sprintf("bytes=%d-%d", off, off+n-1))
}

func (s *S3) get(ctx context.Context, key, rng string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.object(key)}
	if rng != "" {
		in.Range = aws.String(rng)
	}
	// No timeout here: the body is read under ctx for as long as the
	// client reads; the transport's ResponseHeaderTimeout bounds a store
	// that does not answer.
	out, err := s.c.GetObject(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", key, classify(err))
	}
	return unavailableOnError{out.Body}, nil
}

// Delete removes a published object; S3 deletes are idempotent.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	cctx, cancel := s.short(ctx)
	defer cancel()
	if _, err := s.c.DeleteObject(cctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.object(key)}); err != nil {
		return fmt.Errorf("delete %s: %w", key, classify(err))
	}
	return nil
}

// SweepStaged aborts multipart uploads under the prefix that began before
// before: a server killed in the middle of an upload leaves them.
func (s *S3) SweepStaged(ctx context.Context, before time.Time, limit int) (int, error) {
	prefix := ""
	if s.cfg.Prefix != "" {
		prefix = s.cfg.Prefix + "/"
	}
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(prefix)}
	swept := 0
	for swept < limit {
		cctx, cancel := s.short(ctx)
		out, err := s.c.ListMultipartUploads(cctx, in)
		cancel()
		if err != nil {
			return swept, fmt.Errorf("list staged uploads: %w", classify(err))
		}
		for _, u := range out.Uploads {
			if swept >= limit {
				break
			}
			if u.Initiated == nil || !u.Initiated.Before(before) {
				continue
			}
			cctx, cancel := s.short(ctx)
			_, err := s.c.AbortMultipartUpload(cctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.cfg.Bucket), Key: u.Key, UploadId: u.UploadId})
			cancel()
			if err != nil && !isCode(err, "NoSuchUpload") {
				return swept, fmt.Errorf("abort staged upload %s: %w", aws.ToString(u.Key), classify(err))
			}
			swept++
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
	return swept, nil
}

// classify turns an S3 error into the store's sentinels: a missing object
// is ErrNotFound, a failed If-None-Match is ErrExists, and anything that
// says the store did not do its part (network, 5xx, throttling, denied
// credentials) is ErrUnavailable.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err // the caller went away: not the store's fault
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%w: %s", ErrNotFound, ae.ErrorCode())
		case "PreconditionFailed", "ConditionalRequestConflict":
			// 409 ConditionalRequestConflict: a concurrent conditional
			// write of the same key won, or is winning.
			return fmt.Errorf("%w: %s", ErrExists, ae.ErrorCode())
		}
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %v", ErrNotFound, err)
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %v", ErrExists, err)
		}
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// unavailableOnError marks a body that broke off as the store's failure.
type unavailableOnError struct{ io.ReadCloser }

func (u unavailableOnError) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return n, err
}
