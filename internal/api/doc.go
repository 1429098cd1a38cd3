// Package api is jobplane's HTTP surface: thin handlers that authenticate,
// decode, call one service method, and encode. Refusals are problem+json with
// the stable code of the protocol.Error the service returned; the mapping
// lives in one function (writeError).
package api
