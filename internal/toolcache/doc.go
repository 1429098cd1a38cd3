// Package toolcache finds the repository's test-tool modules (tools/NAME,
// each with its own go.mod) and the cache directory their binaries are
// built into once per machine: $XDG_CACHE_HOME (or ~/.cache)/jobplane/
// PREFIX-HASH, HASH naming the module's go.mod and go.sum, so that a version
// change builds anew and .ci/run computes the same path with sha256sum.
package toolcache
