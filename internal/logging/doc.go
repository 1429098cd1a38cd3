// Package logging builds the process logger of jobplane server and worker:
// log/slog in text (for people) or JSON (for log pipelines), one record a
// line, on stderr. A record logged with a context that carries a sampled
// OpenTelemetry span also gets trace_id and span_id, so a log pipeline can
// join a line to its trace.
//
// Identifiers of runs, attempts and runners are attributes of the records
// themselves (run_id, attempt_id, runner_id): the worker's logger carries
// runner_id once registered and each attempt's logger run_id and attempt_id;
// the server's per-request lines take them from the request.
package logging
