// Package catalogs keeps track of what the definitions serve and shows it.
// Package catalog reads one commit's definitions; this one records, for
// every channel branch of the server's definitions repository, each commit
// activated or rejected (with its audit event), hands the active commits
// back after a restart, and answers the views of them: the catalogs, the
// jobs of a channel, and who may run a job. An installation tenant of the
// GitHub App sees its own definitions instead (Tenants).
package catalogs
