// Package openapi holds the OpenAPI 3.1 description of jobplane's HTTP API
// (openapi.yaml, embedded) and serves it as JSON at GET /v1/openapi.json.
//
// The document is the contract, not decoration: the API tests send every
// request and read every answer through openapitest, which checks both
// against it, so a handler that drifts from the document fails the tests.
// It imports nothing internal, so any package may serve or read it.
package openapi
