// Package tickets is the source ticket service: it answers a runner's
// request for the code of its attempt, with a single-use ticket for a
// managed runner and only the repository and commit for a self-hosted one,
// and redeems a ticket, once and while its attempt still holds the lease it
// was issued under, with the archive of the commit the run was pinned to.
//
// The archive comes from the source broker of the configured repositories
// (package source) or, for an owner/name repository of an installation
// tenant, from the GitHub App (Hosted). Whether the attempt is live is the
// run service's to say (Runs, which *control.Service satisfies).
package tickets
