// Package connector parses connector definitions (connectors/<name>.yaml):
// a connector's type, its per-channel bindings and the read and write sets
// of named secrets or roles, and the level a run gets (Level: write only
// when declared and granted, else read). It is pure, so that the
// definitions catalog does not pull in a store or a database driver; the
// broker that releases and mints credentials is package
// internal/connector/broker.
package connector
