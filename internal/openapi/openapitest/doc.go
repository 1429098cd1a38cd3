// Package openapitest checks HTTP exchanges against jobplane's OpenAPI
// document, for tests. Handler wraps a server's handler and Transport wraps
// a client's; either way every request and its answer are checked with
// kin-openapi's request and response validation, and a violation fails the
// test that made the exchange.
//
// The check runs both ways. An answer must be one the document describes
// for the operation and status (body schema, content type, headers). A
// request the document forbids must be refused with a 4xx: a server that
// accepts it is more lenient than its contract, and the document or the
// handler is wrong. A request the document allows may still be refused
// (a 409 is no drift), so that direction is not checked.
//
// Only test binaries import this package, so kin-openapi is not linked into
// jobplane itself.
package openapitest
