// Package githubapp is jobplane as a GitHub App: installations become
// tenants (webhook deliveries bind them and keep their repositories), pull
// requests request runs, Check Runs mirror those runs through an outbox,
// runs of repositories an installation no longer grants are ended, and the
// operator administers installation tenants.
//
// It plugs into the run service (package control) through
// control.Tenants: it gates claims and requests of suspended or deleted
// installations, serves each installation tenant's definitions (its
// .jobplane repository, else the server's on the GitHub channel), hears of
// run state changes in the transactions that make them, and serves the
// sources of GitHub runs. It requests runs through the run service's own
// entry point (control.Service.RequestRunFrom), as the API does. The
// GitHub API itself is package github.
package githubapp
