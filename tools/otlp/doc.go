// Package otlp pins the OTLP receiver the tracing test exports to: Jaeger,
// whose v2 binary receives OTLP over HTTP and keeps traces in memory. It is
// a module of its own so that its many dependencies stay out of jobplane's.
//
//	cd tools/otlp && go build -o "$HOME/.cache/jobplane/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger
//	JOBPLANE_TEST_JAEGER=$HOME/.cache/jobplane/jaeger go test ./internal/e2e -run TestTracesReachAnOTLPReceiver
package otlp
