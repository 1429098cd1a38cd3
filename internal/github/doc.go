// Package github talks to GitHub as a GitHub App: it mints the App's JWT,
// obtains installation tokens narrowed to one repository and the
// permissions one step needs, and uses them for Check Runs and source
// tarballs. It also verifies webhook deliveries.
//
// Installation tokens are bearer credentials to a customer's repositories.
// They live only in this package's memory: the Token type redacts itself in
// every format a logger or encoder could reach, the cache keeps them until
// shortly before GitHub's expiry, and nothing here writes them to disk or to
// a database. A token is requested per (installation, repository,
// permissions) so that a bug elsewhere cannot turn a source fetch for one
// repository into access to another, or into write access.
package github
