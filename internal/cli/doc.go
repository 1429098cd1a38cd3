// Package cli is jobplane's command tree: the server, worker and dev verbs,
// and the client verbs that speak the published HTTP protocol through
// internal/apiclient. Output goes to injected writers so the commands can be
// tested in-process; human-readable by default, JSON with --json.
package cli
