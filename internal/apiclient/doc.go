// Package apiclient is the typed HTTP client of jobplane's published protocol
// (version 1 of the protocol, docs/protocol.md). The CLI and the worker talk to the server
// only through it, so a third-party client or runner needs nothing that is not
// in the protocol document.
//
// Client speaks the control and admin API with a bearer API token.
// RunnerClient speaks the runner API: it signs every request with the runner's
// Ed25519 key, stamping the timestamp and a fresh nonce at send time, so a
// retry is a new request that the server's replay cache accepts.
//
// Both clients make exactly one HTTP request per call and never retry on their
// own: what may be retried, and with which request_id, is the caller's
// decision (see Retryable). A non-2xx answer becomes an *APIError carrying the
// server's problem+json body.
package apiclient
