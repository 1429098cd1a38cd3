// Package server wires jobplane's control plane together: it opens the store
// (applying migrations), the definitions repository, the services and the
// HTTP API, starts the background loops (reaper, nonce purge), and stops them
// in reverse order. It holds no rules of its own.
package server
