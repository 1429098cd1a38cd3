// Package otlp pins the OTLP receiver the tracing test exports to: Jaeger,
// whose v2 binary receives OTLP over HTTP and keeps traces in memory. It is
// a module of its own so that its many dependencies stay out of jobplane's.
//
//	cd tools/otlp && go build -o "$HOME/.cache/jobplane/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger
//	JOBPLANE_TEST_JAEGER=$HOME/.cache/jobplane/jaeger go test ./internal/e2e -run TestTracesReachAnOTLPReceiver
//
// .ci/run builds it once into a cache directory keyed by this module's
// go.mod and go.sum, and sets JOBPLANE_TEST_JAEGER and
// JOBPLANE_TEST_REQUIRE_OTLP=1.
package otlp
