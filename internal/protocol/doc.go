// Package protocol holds the published HTTP protocol of jobplane, version 1:
// the wire payloads, header names, problem codes and the canonical message that
// runners sign. The server's handlers (internal/api) and the client
// (internal/apiclient) both use it, so the two cannot drift apart, and a third
// party can read the whole contract in one place.
package protocol
